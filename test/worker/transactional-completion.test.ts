import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { isJobQueueError, Task, type JobContext, type TransactionalJobContext } from '../../libs/job-queue/src';
import { runTask } from '../../libs/job-queue/src/testing';
import { closeTestApp, createTestApp, openTestApp, type TestAppContext } from '../support/app';
import { connect } from '../support/database';
import { nextEvent, waitFor } from '../support/wait';

/** Handlers park here until the test lets them return: job id → release. */
const gates = new Map<string, () => void>();
const parked = (ctx: JobContext) => new Promise<void>((resolve) => gates.set(ctx.job.id, resolve));
const release = async (jobId: string) => {
  await waitFor(`job ${jobId}'s handler to park`, () => gates.has(jobId));
  gates.get(jobId)!();
};

@Injectable()
class TransactionalTasks {
  /** Writes, adds a follow-up job and returns a result: all of it commits with the completion. */
  @Task('tx_ok', { transaction: true })
  async ok(payload: { park?: boolean }, ctx: TransactionalJobContext) {
    await ctx.manager.query('insert into writes (job_id, attempt) values ($1, $2)', [ctx.job.id, ctx.job.attempts]);
    await ctx.addJob('follow_up', { from: ctx.job.id });
    if (payload.park) await parked(ctx);
    return { wrote: ctx.job.id };
  }

  /** Writes and adds a job, then throws on its first attempt: both are rolled back; the second attempt commits. */
  @Task('tx_throws', { transaction: true, maxAttempts: 2, retryDelay: () => 0 })
  async throws(_payload: unknown, ctx: TransactionalJobContext) {
    await ctx.manager.query('insert into writes (job_id, attempt) values ($1, $2)', [ctx.job.id, ctx.job.attempts]);
    await ctx.addJob('follow_up', { from: ctx.job.id });
    if (ctx.job.attempts === 1) throw new Error('the mail server said no');
  }

  /** Writes, then waits for the test whatever its signal says, and returns as if all went well. */
  @Task('tx_parks', { transaction: true, maxAttempts: 1 })
  async parks(_payload: unknown, ctx: TransactionalJobContext) {
    await ctx.manager.query('insert into writes (job_id, attempt) values ($1, $2)', [ctx.job.id, ctx.job.attempts]);
    await parked(ctx);
  }

  /** Writes, then ignores its timeout and returns late. */
  @Task('tx_slow', { transaction: true, maxAttempts: 1, timeout: 100 })
  async slow(_payload: unknown, ctx: TransactionalJobContext) {
    await ctx.manager.query('insert into writes (job_id, attempt) values ($1, $2)', [ctx.job.id, ctx.job.attempts]);
    await waitFor('the timeout to abort the signal', () => ctx.signal.aborted);
  }

  /** A result that is not JSON fails the attempt: its writes are rolled back. */
  @Task('tx_bad_result', { transaction: true, maxAttempts: 1 })
  async badResult(_payload: unknown, ctx: TransactionalJobContext) {
    await ctx.manager.query('insert into writes (job_id, attempt) values ($1, $2)', [ctx.job.id, ctx.job.attempts]);
    return { n: 1n };
  }

  /** Parks on its first attempt only. */
  @Task('tx_park_once', { transaction: true, retryDelay: () => 0 })
  async parkOnce(_payload: unknown, ctx: TransactionalJobContext) {
    await ctx.manager.query('insert into writes (job_id, attempt) values ($1, $2)', [ctx.job.id, ctx.job.attempts]);
    if (ctx.job.attempts === 1) await parked(ctx);
  }

  /** Ends the attempt's transaction itself, or leaves one of its own open: both misuses fail the attempt. */
  @Task('tx_misuse', { transaction: true, maxAttempts: 1 })
  async misuse(payload: { how: 'commit' | 'leave-open' }, ctx: TransactionalJobContext) {
    await ctx.manager.query('insert into writes (job_id, attempt) values ($1, $2)', [ctx.job.id, ctx.job.attempts]);
    if (payload.how === 'commit') await ctx.manager.queryRunner!.commitTransaction();
    else await ctx.manager.queryRunner!.startTransaction();
  }

  /** Not transactional: no manager. */
  @Task('plain')
  plain(_payload: unknown, ctx: JobContext) {
    return { hasManager: ctx.manager !== undefined };
  }

  @Task('follow_up')
  followUp() {}
}

/**
 * `@Task(name, { transaction: true })`: the handler's writes through ctx.manager, the jobs it
 * adds and the job's completion commit together, or not at all.
 */
describe('transactional completion', () => {
  let ctx: TestAppContext;
  before(async () => {
    ctx = await openTestApp('tx_completion', { providers: [TransactionalTasks], jobQueue: { pollInterval: 50 } });
    await ctx.sql.query('create table writes (job_id bigint not null, attempt int not null)');
  });
  after(() => closeTestApp(ctx));

  const writes = async (jobId: string) => (await ctx.sql.query('select attempt from writes where job_id = $1 order by attempt', [jobId])).rows.map((r) => r.attempt);
  const followUps = async (jobId: string) =>
    (
      await ctx.sql.query(
        `select (select count(*) from job_queue.jobs where task_identifier = 'follow_up' and payload->>'from' = $1)
              + (select count(*) from job_queue.finished_jobs where task_identifier = 'follow_up' and payload->>'from' = $1) as n`,
        [jobId],
      )
    ).rows[0].n as string;
  const finished = async (id: string) =>
    (await ctx.sql.query('select state, attempts, result, last_error, errors from job_queue.finished_jobs where id = $1', [id])).rows[0];
  const active = async (id: string) => (await ctx.sql.query('select locked_by, attempts from job_queue.jobs where id = $1', [id])).rows[0];

  it('commits the handler\'s writes, the jobs it added and the completion together; waiters hear it at the commit', async () => {
    const job = await ctx.t.jobs.add('tx_ok', {});
    const done = await ctx.t.jobs.waitForJob(job.id, { timeout: 30_000 });
    assert.deepEqual(done.result, { wrote: job.id });
    assert.equal(done.state, 'completed');
    assert.deepEqual(await writes(job.id), [1]);
    assert.equal(await followUps(job.id), '1');
  });

  it('rolls back the writes and the added jobs of an attempt that throws; the retry commits once', async () => {
    const job = await ctx.t.jobs.add('tx_throws', {});
    await waitFor('the job to complete', async () => (await finished(job.id))?.state === 'completed');
    const row = await finished(job.id);
    assert.equal(row.attempts, 2);
    assert.deepEqual(row.errors.map((e: { message: string }) => e.message), ['the mail server said no']);
    assert.deepEqual(await writes(job.id), [2], 'only the second attempt wrote');
    assert.equal(await followUps(job.id), '1', 'only the second attempt added its job');
  });

  it('a job cancelled while its handler runs is rolled back and ends cancelled, even if the handler returns', async () => {
    const job = await ctx.t.jobs.add('tx_parks', {});
    await waitFor('the handler to park', () => gates.has(job.id));
    await ctx.t.jobs.cancelJob(job.id, 'changed my mind');
    await release(job.id);
    await waitFor('the job to end', async () => (await finished(job.id)) !== undefined);
    assert.equal((await finished(job.id)).state, 'cancelled');
    assert.deepEqual(await writes(job.id), []);
  });

  it('a job that runs past its timeout is rolled back and fails with JQ_JOB_TIMEOUT, even if the handler returns', async () => {
    const job = await ctx.t.jobs.add('tx_slow', {});
    await waitFor('the job to end', async () => (await finished(job.id)) !== undefined);
    const row = await finished(job.id);
    assert.equal(row.state, 'failed');
    assert.deepEqual(row.errors.map((e: { code: string }) => e.code), ['JQ_JOB_TIMEOUT']);
    assert.deepEqual(await writes(job.id), []);
  });

  it('a result that is not JSON fails the attempt with JQ_RESULT_NOT_JSON and rolls its writes back', async () => {
    const job = await ctx.t.jobs.add('tx_bad_result', {});
    await waitFor('the job to end', async () => (await finished(job.id)) !== undefined);
    const row = await finished(job.id);
    assert.equal(row.state, 'failed');
    assert.deepEqual(row.errors.map((e: { code: string }) => e.code), ['JQ_RESULT_NOT_JSON']);
    assert.deepEqual(await writes(job.id), []);
  });

  it('a job another worker took while the handler ran is not completed: the writes are rolled back and its row left alone', async () => {
    const job = await ctx.t.jobs.add('tx_ok', { park: true });
    await waitFor('the handler to park', () => gates.has(job.id));
    // What a rescue does once this worker is declared dead: the job is someone else's now.
    await ctx.sql.query(`update job_queue.jobs set locked_by = 'another-worker', locked_at = now() where id = $1`, [job.id]);
    const settled = new Promise<void>((resolve) => {
      const subscription = ctx.t.worker.events$.subscribe((event) => {
        if (event.type === 'job:complete' && event.job.id === job.id) {
          subscription.unsubscribe();
          resolve();
        }
      });
    });
    await release(job.id);
    await settled;
    await waitFor('the release to be written', () => (ctx.t.worker as unknown as { state: { batcher: { idle: boolean } } }).state.batcher.idle);
    assert.deepEqual(await active(job.id), { locked_by: 'another-worker', attempts: 1 }, 'the row is as the other worker has it');
    assert.equal(await finished(job.id), undefined);
    assert.deepEqual(await writes(job.id), []);
    assert.equal(await followUps(job.id), '0', 'the job it added was rolled back too');
    await ctx.sql.query('delete from job_queue.jobs where id = $1', [job.id]);
  });

  it('a cancel recorded in the row but not heard yet rolls the attempt back; the job ends cancelled', async () => {
    const job = await ctx.t.jobs.add('tx_parks', {});
    await waitFor('the handler to park', () => gates.has(job.id));
    // what cancelJob() writes, without its NOTIFY: only the completion's check can see it
    await ctx.sql.query(`update job_queue.jobs set cancel_requested_at = now(), cancel_reason = 'quietly' where id = $1`, [job.id]);
    await release(job.id);
    await waitFor('the job to end', async () => (await finished(job.id)) !== undefined);
    assert.deepEqual({ state: (await finished(job.id)).state, lastError: (await finished(job.id)).last_error }, { state: 'cancelled', lastError: 'JQ_JOB_CANCELLED: quietly' });
    assert.deepEqual(await writes(job.id), []);
  });

  it('frees its named queue at the commit: the next job of the queue runs', async () => {
    const first = await ctx.t.jobs.add('tx_ok', {}, { queueName: 'tx-serial' });
    const second = await ctx.t.jobs.add('tx_ok', {}, { queueName: 'tx-serial' });
    for (const job of [first, second]) assert.equal((await ctx.t.jobs.waitForJob(job.id, { timeout: 30_000 })).state, 'completed');
    assert.deepEqual([await writes(first.id), await writes(second.id)], [[1], [1]]);
    const { rows } = await ctx.sql.query(`select locked_by from job_queue.job_queues where queue_name = 'tx-serial'`);
    assert.ok(rows.every((row) => row.locked_by === null), 'the queue is not held');
  });

  it('a caller holding the job\'s row makes the completion give up after a second: the attempt is rolled back and retried', async () => {
    const job = await ctx.t.jobs.add('tx_park_once', {}, { jobKey: 'tx-held' });
    await waitFor('the handler to park', () => gates.has(job.id));
    const caller = await connect(ctx.db.url);
    try {
      await caller.query('begin');
      await caller.query('select id from job_queue.jobs where id = $1 for update', [job.id]);
      const failed = nextEvent(ctx.t.worker.events$, 'the attempt to fail', (e) => e.type === 'job:error' && e.job.id === job.id);
      await release(job.id);
      const event = (await failed) as { error: { code?: string } };
      assert.equal(event.error.code, '55P03', 'lock_not_available');
      await caller.query('commit');
    } finally {
      await caller.end();
    }
    await waitFor('the retry to complete', async () => (await finished(job.id))?.state === 'completed');
    const row = await finished(job.id);
    assert.deepEqual({ attempts: row.attempts, codes: row.errors.map((e: { code: string }) => e.code) }, { attempts: 2, codes: ['55P03'] });
    assert.deepEqual(await writes(job.id), [2], 'only the attempt that completed wrote');
  });

  for (const how of ['commit', 'leave-open'] as const) {
    it(`a handler that ${how === 'commit' ? 'commits the transaction itself' : 'leaves a transaction of its own open'} fails the attempt with JQ_TRANSACTION_MISUSED`, async () => {
      const job = await ctx.t.jobs.add('tx_misuse', { how });
      await waitFor('the job to end', async () => (await finished(job.id)) !== undefined);
      const row = await finished(job.id);
      assert.deepEqual({ state: row.state, codes: row.errors.map((e: { code: string }) => e.code) }, { state: 'failed', codes: ['JQ_TRANSACTION_MISUSED'] });
      // its own commit made its write stick; a transaction left open is rolled back with the attempt's
      assert.deepEqual(await writes(job.id), how === 'commit' ? [1] : []);
      const { rows } = await ctx.sql.query(`select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`);
      assert.equal(rows[0].n, 0, 'no connection went back to the pool inside a transaction');
    });
  }

  it('only a transactional task gets ctx.manager; runTask() gives one and commits it', async () => {
    const plain = await ctx.t.jobs.add('plain', {});
    assert.deepEqual((await ctx.t.jobs.waitForJob(plain.id, { timeout: 30_000 })).result, { hasManager: false });
    const run = await runTask(ctx.t.app, 'tx_ok', {});
    assert.deepEqual(run.result, { wrote: '0' });
    assert.deepEqual(await writes('0'), [1], 'runTask committed the handler\'s write');
  });

  it('transaction must be a boolean: JQ_INVALID_TASK_OPTIONS at startup', async () => {
    @Injectable()
    class BadTasks {
      @Task('bad_tx', { transaction: 'yes' as unknown as boolean })
      run() {}
    }
    await assert.rejects(createTestApp({ url: ctx.db.url, providers: [BadTasks] }), (error) => isJobQueueError(error, 'JQ_INVALID_TASK_OPTIONS'));
  });
});
