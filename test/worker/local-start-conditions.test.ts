import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Notification, PoolClient } from 'pg';
import { Task, type Job, type JobContext, type JobQueueModuleOptions } from '../../libs/job-queue/src';
import { WorkerMembership } from '../../libs/job-queue/src/worker/membership';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { waitFor } from '../support/wait';

/** The jobs `quick` ran, by id. */
const ran = new Set<string>();

@Injectable()
class QuickTasks {
  @Task('quick')
  quick(_payload: unknown, ctx: JobContext) {
    ran.add(ctx.job.id);
  }
}

let markers = 0;

/**
 * Brings the worker to rest: runUntilIdle() runs what is there and writes its results; a
 * marker NOTIFY, heard on the worker's own LISTEN connection, proves that every NOTIFY
 * committed before it (a named queue freed by a release, a job added) has woken the worker
 * already, the marker's own wake-up included; a second runUntilIdle() waits for the claims
 * those wake-ups began. Then nothing is on its way to the worker (no poll: pollInterval is
 * long), no claim is under way, and every slot is free.
 */
async function rest({ t, sql }: TestAppContext): Promise<void> {
  await t.worker.runUntilIdle();
  const connection = (t.app.get(WorkerMembership) as unknown as { listener?: { connection?: PoolClient } }).listener?.connection;
  assert.ok(connection, 'the worker listens');
  const marker = `rest-${++markers}`;
  let heard = false;
  // Added after the worker's own listener, so called after it: the worker has been woken by then.
  const hear = (message: Notification) => void (message.payload === marker && (heard = true));
  connection.on('notification', hear);
  try {
    await sql.query(`select pg_notify('job_queue:jobs', $1)`, [marker]);
    await waitFor(`the worker to hear ${marker}`, () => heard);
  } finally {
    connection.off('notification', hear);
  }
  await t.worker.runUntilIdle();
}

/** add() returned the job unstarted, for a claim: not locked, no attempt begun. */
function assertNotStarted(job: Job, state: 'waiting' | 'scheduled' = 'waiting'): void {
  assert.deepEqual(
    { state: job.state, lockedBy: job.lockedBy, attempts: job.attempts, startedAt: job.startedAt },
    { state, lockedBy: null, attempts: 0, startedAt: null },
    'not started at its add',
  );
}

/** The control: a plain add() from a resting worker returns the job started here, claimed by its insert. */
async function assertPlainAddStarts(ctx: TestAppContext): Promise<void> {
  await rest(ctx);
  const plain = await ctx.t.jobs.add('quick', {});
  assert.deepEqual({ state: plain.state, lockedBy: plain.lockedBy, attempts: plain.attempts }, { state: 'running', lockedBy: ctx.t.worker.workerId, attempts: 1 }, 'a plain add() starts at once');
  await waitFor('the plain job to run', () => ran.has(plain.id));
}

/** A test app for these tests, opened in before() and at rest; each test leaves an empty jobs table. */
function conditionsApp(label: string, jobQueue: JobQueueModuleOptions): { ctx: TestAppContext } {
  const app = {} as { ctx: TestAppContext };
  before(async () => {
    // No poll: a job that does not start at its add needs a NOTIFY and a claim.
    app.ctx = await openTestApp(label, { providers: [QuickTasks], jobQueue: { pollInterval: 600_000, ...jobQueue } });
    await rest(app.ctx);
  });
  afterEach(async () => {
    await app.ctx.t.worker.runUntilIdle();
    await app.ctx.sql.query('delete from job_queue.jobs');
  });
  after(() => closeTestApp(app.ctx));
  return app;
}

/**
 * localStart's conditions, one at a time: each, from a resting worker with every slot free,
 * makes add() return a job that waits for a claim; a plain add() from the same state starts
 * at once (the README's `localStart` row).
 */
describe('localStart: each condition alone keeps a job from starting at its add', () => {
  const app = conditionsApp('local_start_conditions', { forbiddenFlags: ['blocked'], externalTasks: ['elsewhere'] });

  it('a job key', async () => {
    await rest(app.ctx);
    const keyed = await app.ctx.t.jobs.add('quick', {}, { jobKey: 'k' });
    assertNotStarted(keyed);
    await waitFor('the keyed job to run after its claim', () => ran.has(keyed.id));
    await assertPlainAddStarts(app.ctx);
  });

  it('a named queue', async () => {
    await rest(app.ctx);
    const queued = await app.ctx.t.jobs.add('quick', {}, { queueName: 'serial' });
    assertNotStarted(queued);
    await waitFor('the queued job to run after its claim', () => ran.has(queued.id));
    await assertPlainAddStarts(app.ctx);
  });

  it('a future runAt', async () => {
    await rest(app.ctx);
    const later = await app.ctx.t.jobs.add('quick', {}, { runAt: new Date(Date.now() + 3_600_000) });
    assertNotStarted(later, 'scheduled');
    await assertPlainAddStarts(app.ctx);
    assert.ok(!ran.has(later.id), 'the later job did not run');
  });

  it('a forbidden flag', async () => {
    await rest(app.ctx);
    const forbidden = await app.ctx.t.jobs.add('quick', {}, { flags: ['blocked'] });
    assertNotStarted(forbidden);
    await assertPlainAddStarts(app.ctx);
    assert.ok(!ran.has(forbidden.id), 'the forbidden job did not run');
  });

  it('a task this process does not run', async () => {
    await rest(app.ctx);
    const elsewhere = await app.ctx.t.jobs.add('elsewhere' as never, {} as never);
    assertNotStarted(elsewhere);
    await assertPlainAddStarts(app.ctx);
    const { rows } = await app.ctx.sql.query('select locked_by, attempts from job_queue.jobs where id = $1', [elsewhere.id]);
    assert.deepEqual(rows, [{ locked_by: null, attempts: 0 }], 'left for the app that runs it');
  });
});

describe('localStart: a forbiddenFlags function keeps every flagged job from starting at its add', () => {
  // A function may answer differently at each call: a flagged job goes through a claim, which asks it.
  const app = conditionsApp('local_start_flags_fn', { forbiddenFlags: async () => ['blocked'] });

  it('a flag the function allows: the job waits for a claim, which runs it', async () => {
    await rest(app.ctx);
    const flagged = await app.ctx.t.jobs.add('quick', {}, { flags: ['allowed'] });
    assertNotStarted(flagged);
    await waitFor('the flagged job to run after its claim', () => ran.has(flagged.id));
    await assertPlainAddStarts(app.ctx);
  });
});
