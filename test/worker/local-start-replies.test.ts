import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { after, afterEach, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { WorkerMembership } from '../../libs/job-queue/src/worker/membership';
import { JobQueueDatabase, type Statement } from '../../libs/job-queue/src/db/job-queue-database';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { waitFor } from '../support/wait';

/** What the caller of add() has in its async context (a request id, say). */
const callerContext = new AsyncLocalStorage<string>();

/** Each run of a `gated` job, by its payload's name, and what it saw; it runs until the test opens its gate. */
const seen = new Map<string, Array<{ id: string; callerContext: string | undefined }>>();
const gates: Array<() => void> = [];
let passThrough = false;
const runs = (name: string) => seen.get(name)?.length ?? 0;

@Injectable()
class ReplyTasks {
  @Task('gated')
  async gated(payload: { name: string }, ctx: JobContext) {
    seen.set(payload.name, [...(seen.get(payload.name) ?? []), { id: ctx.job.id, callerContext: callerContext.getStore() }]);
    if (!passThrough) await new Promise<void>((resolve) => gates.push(resolve));
  }

  @Task('quick')
  async quick() {}
}

/** Every deferred() not resolved yet: afterEach resolves them, so that a failed test leaves no insert waiting (a stop would wait for it). */
const unresolved = new Set<() => void>();

/** A promise the test resolves. */
function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  unresolved.add(resolve);
  return { promise, resolve: () => (unresolved.delete(resolve), resolve()) };
}

/**
 * The worker's state "a claim failed after the server may have committed it" (a claim whose
 * reply was lost): the next heartbeat gives back the rows locked for it that it does not know.
 */
const producerOf = (t: TestApp) => (t.worker as unknown as { producer: { claimReplyLost: boolean } }).producer;
const markClaimReplyLost = (t: TestApp) => void (producerOf(t).claimReplyLost = true);
/** The give-back of rows locked for the worker that it does not know was done (jobs do not start at their add before: keepSlot). */
const giveBackDone = (t: TestApp) => !producerOf(t).claimReplyLost;

describe('localStart and the replies of its insert', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  let jqdb: JobQueueDatabase;
  let realRun: JobQueueDatabase['run'];
  /** Heartbeats answered so far. */
  let heartbeats = 0;

  before(async () => {
    // No poll: a job runs at its add, or by a NOTIFY (an add elsewhere, a give-back) and a claim.
    ({ db, sql, t } = await openTestApp('local_start_replies', {
      providers: [ReplyTasks],
      jobQueue: { concurrency: 2, pollInterval: 600_000, heartbeatInterval: 100 },
    }));
    await t.worker.runUntilIdle(); // no claim on its way: the start's catch-up is done
    jqdb = t.app.get(JobQueueDatabase);
    realRun = jqdb.run.bind(jqdb);
    const membership = t.app.get(WorkerMembership);
    const runPinned = membership.run.bind(membership);
    membership.run = (async (statement: Statement, values: unknown[]) => {
      const rows = await runPinned(statement, values);
      if (statement === 'heartbeatWorker') heartbeats += 1;
      return rows;
    }) as typeof membership.run;
  });
  afterEach(async () => {
    for (const resolve of unresolved) resolve();
    unresolved.clear();
    jqdb.run = realRun;
    passThrough = true;
    for (const open of gates.splice(0)) open();
    await waitFor('every job to finish', async () => (await sql.query(`select count(*)::int as n from job_queue.jobs`)).rows[0].n === 0);
    await waitFor('no give-back left to do', () => giveBackDone(t));
    await t.worker.runUntilIdle(); // no claim on its way
    passThrough = false;
    seen.clear();
  });
  after(async () => {
    await closeTestApp({ db, sql, t });
  });

  /**
   * Makes the insert of a job started at its add (sql addJobStarted) go through `then`, after
   * the real statement ran (it committed), or instead of it with `{ sent: false }`.
   */
  function onInsert(then: (rows: unknown[]) => Promise<unknown[]>, { sent = true } = {}) {
    jqdb.run = (async (statement: Statement, values: unknown[], manager?: never) => {
      if (statement !== 'addJobStarted') return realRun(statement, values, manager);
      return then(sent ? await realRun(statement, values, manager) : []);
    }) as JobQueueDatabase['run'];
  }

  it('an insert that committed but whose reply was lost: add() fails, and the job is given back and runs once', async () => {
    onInsert(async () => {
      throw new Error('Connection terminated unexpectedly');
    });
    await assert.rejects(t.jobs.add('gated', { name: 'lost-reply' }), /Connection terminated/);
    jqdb.run = realRun;
    const [{ id }] = (await sql.query(`select id::text from job_queue.jobs where payload->>'name' = 'lost-reply'`)).rows;
    // locked for this worker by the insert, which it does not know of: a claim whose reply was lost is given back at the next heartbeat
    await waitFor('the job to run', () => runs('lost-reply') === 1);
    for (const open of gates.splice(0)) open();
    await waitFor('the job to complete', async () => (await t.jobs.getJob(id))?.state === 'completed');
    assert.equal(runs('lost-reply'), 1);
  });

  it('a give-back of what the worker does not know (after a lost claim reply) while an insert reply is on its way: the job runs once', async () => {
    const committed = deferred();
    const reply = deferred();
    onInsert(async (rows) => {
      committed.resolve();
      await reply.promise;
      return rows;
    });
    const adding = t.jobs.add('gated', { name: 'racing' });
    await committed.promise;
    markClaimReplyLost(t);
    // The heartbeat after the flag schedules the give-back, which runs on the heartbeats' own
    // connection: once the heartbeat after that is answered, the give-back has been answered too.
    const beats = heartbeats;
    await waitFor('two heartbeats', () => heartbeats >= beats + 2);
    assert.equal(runs('racing'), 0, "nothing ran the job while its insert's reply was on its way");
    reply.resolve();
    const job = await adding;
    await waitFor('the job to start', () => runs('racing') >= 1);
    for (const open of gates.splice(0)) open();
    await waitFor('the job to complete', async () => (await t.jobs.getJob(job.id))?.state === 'completed');
    passThrough = true;
    for (const open of gates.splice(0)) open();
    assert.equal(runs('racing'), 1, 'ran once');
  });

  it("an insert that fails hands its slot to a claimed job waiting for it, outside the adding caller's async context", async () => {
    // Fast jobs first, so that the worker claims ahead of its free slots (prefetch.ts).
    await t.jobs.addMany(Array.from({ length: 80 }, () => ({ identifier: 'quick' })));
    await t.worker.runUntilIdle();
    const running = await t.jobs.add('gated', { name: 'running' });
    assert.equal(running.state, 'running', 'started at its add: one slot left');
    const sent = deferred();
    const failNow = deferred();
    onInsert(
      async () => {
        sent.resolve();
        await failNow.promise;
        throw new Error('insert failed');
      },
      { sent: false },
    );
    const adding = callerContext.run('request', () => t.jobs.add('gated', { name: 'failing' }));
    await sent.promise;
    // added where it cannot start at its add: claimed, and held for the slot the insert keeps
    const waiting = await t.dataSource.transaction((manager) => t.jobs.add('gated', { name: 'waiting' }, { manager }));
    await waitFor('the waiting job to be claimed', async () => (await sql.query('select locked_by from job_queue.jobs where id = $1', [waiting.id])).rows[0].locked_by !== null);
    assert.equal(runs('waiting'), 0, 'no free slot yet');
    failNow.resolve();
    await assert.rejects(adding, /insert failed/);
    await waitFor('the waiting job to start in the freed slot', () => runs('waiting') === 1);
    assert.equal(seen.get('waiting')![0].callerContext, undefined, "the handler runs outside the adding caller's async context");
  });
});
