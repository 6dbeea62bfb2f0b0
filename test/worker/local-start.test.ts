import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { after, afterEach, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { closeTestApp, createTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect } from '../support/database';
import { NotificationRecorder } from '../support/notifications';
import { waitFor } from '../support/wait';

/** What the caller of add() has in its async context (a request id, say): a locally started handler must not see it. */
const callerContext = new AsyncLocalStorage<string>();

/** Each job of `gated` runs until the test opens its gate; what each run saw is recorded here, outside the handler. */
const gates = new Map<string, () => void>();
const seen = new Map<string, Array<{ pid: number; attempts: number; callerContext: string | undefined }>>();
const open = (id: string) => gates.get(id)?.();
/** Between tests: every gated job runs through. */
let passThrough = false;

@Injectable()
class GatedTasks {
  @Task('gated')
  async gated(_payload: unknown, ctx: JobContext) {
    seen.set(ctx.job.id, [...(seen.get(ctx.job.id) ?? []), { pid: process.pid, attempts: ctx.job.attempts, callerContext: callerContext.getStore() }]);
    if (!passThrough) await new Promise<void>((resolve) => gates.set(ctx.job.id, resolve));
  }

  @Task('flagged')
  async flagged() {}
}

/** The job's row as the tests read it. */
async function row(sql: Client, id: string) {
  const { rows } = await sql.query(
    `select locked_by, attempts, started_at is not null as started, coalesce(locked_at = created_at, false) as claimed_at_insert from job_queue.jobs where id = $1`,
    [id],
  );
  return rows[0] as { locked_by: string | null; attempts: number; started: boolean; claimed_at_insert: boolean } | undefined;
}

const runs = (id: string) => seen.get(id)?.length ?? 0;

describe('localStart: a job added in a process whose worker has a free slot starts there, claimed by its insert', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  let notifications: NotificationRecorder;
  const events: JobQueueEvent[] = [];

  before(async () => {
    // No poll during a test: a job that does not start at its add needs a NOTIFY and a claim.
    ({ db, sql, t } = await openTestApp('local_start', {
      providers: [GatedTasks],
      jobQueue: { concurrency: 2, pollInterval: 600_000, forbiddenFlags: ['blocked'], externalTasks: ['elsewhere'] },
    }));
    t.worker.events$.subscribe((event) => events.push(event));
    notifications = await NotificationRecorder.listen(db.url, 'job_queue:jobs');
    await t.worker.runUntilIdle(); // no claim on its way (its free slots are its own): the start's catch-up is done
  });
  afterEach(async () => {
    passThrough = true;
    for (const id of gates.keys()) open(id);
    await waitFor('every started job to finish', async () => (await sql.query(`select count(*)::int as n from job_queue.jobs where locked_by is not null`)).rows[0].n === 0);
    await sql.query('delete from job_queue.jobs');
    await t.worker.runUntilIdle(); // claims woken by the last test's releases are done
    gates.clear();
    passThrough = false;
  });
  after(async () => {
    await notifications.end();
    await closeTestApp({ db, sql, t });
  });

  it('starts at once: add() returns it running, its row was locked by the insert, and no worker was notified', async () => {
    // No barrier first: nothing was notified yet, and its marker would wake the worker, whose claim on its way has the free slots.
    const job = await callerContext.run('request 1', () => t.jobs.add('gated', { n: 1 }));
    assert.equal(job.state, 'running');
    assert.equal(job.lockedBy, t.worker.workerId);
    assert.equal(job.attempts, 1);
    assert.ok(job.startedAt, 'started');
    await waitFor('the handler to start', () => runs(job.id) === 1);
    assert.deepEqual(await row(sql, job.id), { locked_by: t.worker.workerId, attempts: 1, started: true, claimed_at_insert: true });
    assert.deepEqual(await notifications.barrier(), [], 'no NOTIFY: nothing for other workers to look for');
    assert.equal(seen.get(job.id)![0].callerContext, undefined, "the handler runs outside the caller's async context");
    open(job.id);
    await waitFor('the job to complete', async () => (await t.jobs.getJob(job.id))?.state === 'completed');
    assert.equal(runs(job.id), 1);
    assert.ok(events.some((e) => e.type === 'job:start' && e.job.id === job.id));
  });

  it('goes through the table when it cannot start here: in a transaction, in a named queue, later, keyed, with a forbidden flag, for another app', async () => {
    await notifications.barrier();
    const inTransaction = await t.dataSource.transaction((manager) => t.jobs.add('gated', { n: 2 }, { manager }));
    const queued = await t.jobs.add('gated', { n: 3 }, { queueName: 'serial' });
    const later = await t.jobs.add('gated', { n: 4 }, { runAt: new Date(Date.now() + 3_600_000) });
    const keyed = await t.jobs.add('gated', { n: 5 }, { jobKey: 'k' });
    const forbidden = await t.jobs.add('flagged', {}, { flags: ['blocked'] });
    const elsewhere = await t.jobs.add('elsewhere' as never, {} as never);
    for (const job of [inTransaction, queued, keyed, forbidden, elsewhere]) assert.equal(job.state, 'waiting', `job ${job.id} waits`);
    assert.equal(later.state, 'scheduled');
    // each due one sent its NOTIFY: workers elsewhere may claim it
    assert.equal((await notifications.barrier()).length, 5);
    // two slots: the first two due jobs this worker may run are claimed, the rest wait
    await waitFor('two jobs to start', () => runs(inTransaction.id) + runs(queued.id) + runs(keyed.id) === 2);
    for (const job of [forbidden, elsewhere, later]) assert.equal((await row(sql, job.id))?.locked_by, null, `job ${job.id} is not taken here`);
  });

  it('goes through the table when every slot is taken, and starts when one frees', async () => {
    const first = await t.jobs.add('gated', { n: 6 });
    const second = await t.jobs.add('gated', { n: 7 });
    assert.deepEqual([first.state, second.state], ['running', 'running']);
    const third = await t.jobs.add('gated', { n: 8 });
    assert.equal(third.state, 'waiting', 'no free slot: added for a claim');
    assert.equal((await row(sql, third.id))?.locked_by, null);
    await waitFor('the first two to start', () => runs(first.id) === 1 && runs(second.id) === 1);
    open(first.id);
    // the release of the first frees a slot; the third was NOTIFYed at its add, and is claimed now or at the next wake
    await waitFor('the third job to start once a slot is free', () => runs(third.id) === 1);
    assert.equal(runs(third.id), 1);
  });

  it('with localStart: false, every job goes through NOTIFY and a claim', async () => {
    const other = await createTestApp({ url: db.url, providers: [GatedTasks], jobQueue: { concurrency: 2, localStart: false, pollInterval: 600_000 } });
    await t.worker.stop(); // only `other` runs jobs now
    try {
      await notifications.barrier();
      const job = await other.jobs.add('gated', { n: 9 });
      assert.equal(job.state, 'waiting');
      assert.deepEqual(await notifications.barrier(), [job.id], 'its NOTIFY names it, for a claim by id');
      await waitFor('the job to start by its claim', () => runs(job.id) === 1);
      assert.equal((await row(sql, job.id))?.locked_by, other.worker.workerId);
      assert.equal((await row(sql, job.id))?.claimed_at_insert, false);
    } finally {
      for (const id of gates.keys()) open(id);
      await other.close();
      await t.worker.start();
    }
  });
});

describe('localStart while the insert waits: the worker stops, or is declared dead', () => {
  let db: TestDatabase;
  let sql: Client;
  let blocker: Client;

  before(async () => {
    ({ db, sql } = await openTestApp('local_start_races', { jobQueue: { worker: false } }));
    seen.clear(); // job ids start again in this database
    gates.clear();
    blocker = await connect(db.url);
  });
  after(async () => {
    await blocker.end();
    await closeTestApp({ db, sql });
  });

  /** Holds inserts into jobs (a SHARE lock conflicts with theirs) until release(); resolves once an insert waits on it. */
  async function holdInserts(): Promise<{ release: () => Promise<void> }> {
    await blocker.query('begin');
    await blocker.query('lock table job_queue.jobs in share mode');
    return { release: async () => void (await blocker.query('commit')) };
  }
  const insertWaiting = async () =>
    (await sql.query(`select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like '%claimer as%'`)).rows[0].n === 1;

  it('a stop that begins during the insert gives the job back unrun, its attempt returned, and a later worker runs it once', async () => {
    const app = await createTestApp({ url: db.url, providers: [GatedTasks], jobQueue: { pollInterval: 600_000 } });
    await app.worker.runUntilIdle(); // the start's catch-up claim is done
    const events: JobQueueEvent[] = [];
    app.worker.events$.subscribe((event) => events.push(event));
    const hold = await holdInserts();
    const adding = app.jobs.add('gated', { n: 10 });
    await waitFor('the insert to wait for the lock', insertWaiting);
    const stopping = app.worker.stop();
    await hold.release();
    const job = await adding;
    await stopping;
    assert.equal(job.state, 'running', 'the insert claimed it for the worker, which was still running when the add began');
    assert.equal(runs(job.id), 0, 'never started');
    assert.deepEqual(await row(sql, job.id), { locked_by: null, attempts: 0, started: false, claimed_at_insert: false });
    const stop = events.find((e) => e.type === 'worker:stop');
    assert.ok(stop?.type === 'worker:stop' && stop.givenBack.includes(job.id), 'given back by the stop');
    await app.close();

    const next = await createTestApp({ url: db.url, providers: [GatedTasks], jobQueue: { pollInterval: 100 } });
    try {
      await waitFor('the job to run in the next worker', () => runs(job.id) === 1);
      open(job.id);
      await waitFor('the job to complete', async () => (await next.jobs.getJob(job.id))?.state === 'completed');
      assert.equal(runs(job.id), 1);
    } finally {
      await next.close();
    }
  });

  it('a worker declared dead during the insert does not run the job; it runs once, after the worker rejoins', async () => {
    const app = await createTestApp({
      url: db.url,
      providers: [GatedTasks],
      jobQueue: { pollInterval: 100, heartbeatInterval: 100, workerTimeout: 1000 },
    });
    const events: JobQueueEvent[] = [];
    app.worker.events$.subscribe((event) => events.push(event));
    try {
      await app.worker.runUntilIdle(); // the start's catch-up claim is done
      const deadId = app.worker.workerId;
      const hold = await holdInserts();
      const adding = app.jobs.add('gated', { n: 11 });
      await waitFor('the insert to wait for the lock', insertWaiting);
      // what the sweep does to a worker it declares dead: its row goes
      await sql.query('delete from job_queue.workers where id = $1', [deadId]);
      await hold.release();
      const job = await adding;
      await waitFor('the worker to learn it was declared dead', () => events.some((e) => e.type === 'worker:fenced'));
      await waitFor('the job to run once', () => runs(job.id) === 1);
      const [run] = seen.get(job.id)!;
      open(job.id);
      await waitFor('the job to complete', async () => (await app.jobs.getJob(job.id))?.state === 'completed');
      assert.equal(runs(job.id), 1, 'ran once');
      assert.notEqual((await app.jobs.getJob(job.id))?.workerId, deadId, 'by the rejoined worker, not under the dead id');
      assert.ok(run.attempts >= 1);
    } finally {
      for (const id of gates.keys()) open(id);
      await app.close();
    }
  });
});
