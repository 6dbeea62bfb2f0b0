import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { isJobQueueError, Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { closeTestApp, createTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { waitFor, waitForValue } from '../support/wait';

/** Per run of the `ignores` task: when it began and ended. */
const ignoredRuns: Array<{ start: number; end?: number }> = [];
let politeReasons: unknown[] = [];
const defaultTimeoutReasons: unknown[] = [];
const lateLooks: Array<{ aborted: boolean; reason: unknown }> = [];

@Injectable()
class TimeoutTasks {
  /** Honours its signal: an attempt ends as soon as the timeout aborts it. */
  @Task('polite', { timeout: '200ms', maxAttempts: 2, retryDelay: () => 0 })
  async polite(_payload: unknown, ctx: JobContext) {
    await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
  }

  /** Ignores its signal, runs 1.5 s (past the 1 s after which it counts as stuck), and would even succeed: the timeout is its outcome all the same. */
  @Task('ignores', { timeout: 200, maxAttempts: 2, retryDelay: () => 0 })
  async ignores() {
    const run: { start: number; end?: number } = { start: Date.now() };
    ignoredRuns.push(run);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    run.end = Date.now();
    return 'done anyway';
  }

  /** No timeout of its own: the module's jobTimeout applies. */
  @Task('uses_default', { maxAttempts: 1 })
  async usesDefault(_payload: unknown, ctx: JobContext) {
    await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
    defaultTimeoutReasons.push(ctx.signal.reason);
    throw ctx.signal.reason;
  }

  /** Looks at its signal only after its timeout (300 ms): it must find it aborted, with the timeout as its reason. */
  @Task('looks_late', { timeout: 100, maxAttempts: 1 })
  async looksLate(_payload: unknown, ctx: JobContext) {
    await new Promise((resolve) => setTimeout(resolve, 300));
    lateLooks.push({ aborted: ctx.signal.aborted, reason: ctx.signal.reason });
  }

  /** Finishes well within its timeout. */
  @Task('quick', { timeout: '5s' })
  async quick() {
    return 'ok';
  }
}

describe('per-job timeouts', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  const events: JobQueueEvent[] = [];

  before(async () => {
    ({ db, sql, t } = await openTestApp('timeouts', { providers: [TimeoutTasks], jobQueue: { jobTimeout: '300ms', concurrency: 4 } }));
    t.worker.events$.subscribe((e) => events.push(e));
  });
  after(() => closeTestApp({ db, sql, t }));

  const jobRow = async (id: string) =>
    (await sql.query('select attempts, max_attempts, last_error, locked_by from job_queue.jobs where id = $1', [id])).rows[0];
  /** Waits for the job's final failure to be written: gone from jobs, its row in finished_jobs. */
  const failedRow = async (id: string) => {
    await waitForValue(sql, 'its failure to be written', `select count(*)::int from job_queue.finished_jobs where id = $1 and state = 'failed'`, 1, [id]);
    assert.equal(await jobRow(id), undefined, 'gone from jobs');
    return (await sql.query('select attempts, max_attempts, last_error, errors, result from job_queue.finished_jobs where id = $1', [id])).rows[0];
  };
  /** The errors entries of a finished row, as [attempt, code, message]. */
  const attemptErrors = (row: { errors: Array<{ attempt: number; code: string | null; message: string }> }) =>
    row.errors.map((e) => [e.attempt, e.code, e.message]);

  it('a handler that first reads its signal after the timeout finds it aborted, with the timeout as its reason', async () => {
    const job = await t.jobs.add('looks_late');
    const row = await failedRow(job.id);
    assert.match(row.last_error, /^JQ_JOB_TIMEOUT: job \d+ \(looks_late\) ran past its timeout of 100 ms$/);
    assert.equal(lateLooks.length, 1);
    assert.equal(lateLooks[0].aborted, true);
    assert.ok(isJobQueueError(lateLooks[0].reason) && lateLooks[0].reason.code === 'JQ_JOB_TIMEOUT', String(lateLooks[0].reason));
  });

  it('a timeout aborts the signal with JQ_JOB_TIMEOUT, fails the attempt, retries, and finally fails the job for good', async () => {
    politeReasons = [];
    const sub = t.worker.events$.subscribe((e) => e.type === 'job:error' || e.type === 'job:failed' ? politeReasons.push(e.error) : undefined);
    const job = await t.jobs.add('polite');
    await waitFor('the job to fail for good', () => events.some((e) => e.type === 'job:failed' && e.job.id === job.id));
    sub.unsubscribe();
    const row = await failedRow(job.id);
    assert.equal(row.attempts, 2);
    assert.equal(row.max_attempts, 2);
    assert.match(row.last_error, /^JQ_JOB_TIMEOUT: job \d+ \(polite\) ran past its timeout of 200 ms$/);
    assert.deepEqual(attemptErrors(row), [[1, 'JQ_JOB_TIMEOUT', row.last_error], [2, 'JQ_JOB_TIMEOUT', row.last_error]], 'both attempts recorded with their code');
    assert.equal(politeReasons.length, 2);
    for (const reason of politeReasons) assert.ok(isJobQueueError(reason, 'JQ_JOB_TIMEOUT'), String(reason));
    const error = events.find((e) => e.type === 'job:error' && e.job.id === job.id);
    assert.ok(error?.type === 'job:error' && error.retryAt instanceof Date, 'the first timeout was retried');
  });

  it('a handler that ignores the signal keeps its job and never runs twice at once; it is reported stuck, and its outcome is the timeout', async () => {
    ignoredRuns.length = 0;
    const job = await t.jobs.add('ignores');
    await waitFor('the first attempt to be reported stuck', () =>
      events.some((e) => e.type === 'job:stuck' && e.job.id === job.id && e.reason === 'timeout'),
    );
    // past its timeout and stuck, it still holds the job: nothing else may take it
    const stuckRow = await jobRow(job.id);
    assert.equal(stuckRow.locked_by, t.worker.workerId);
    assert.equal(ignoredRuns.length, 1);

    await waitFor('the job to fail for good', () => events.some((e) => e.type === 'job:failed' && e.job.id === job.id));
    const row = await failedRow(job.id);
    assert.equal(ignoredRuns.length, 2, 'two attempts');
    assert.ok(ignoredRuns[0].end! <= ignoredRuns[1].start, 'the second began only after the first had settled');
    assert.equal(row.attempts, 2);
    assert.match(row.last_error, /^JQ_JOB_TIMEOUT: /, 'the timeout is the outcome, though the handler returned');
    assert.equal(row.result, null, 'the value the handler returned is not kept');
    assert.deepEqual(attemptErrors(row), [[1, 'JQ_JOB_TIMEOUT', row.last_error], [2, 'JQ_JOB_TIMEOUT', row.last_error]]);
    assert.equal(events.some((e) => e.type === 'job:success' && e.job.id === job.id), false);
  });

  it('the module\'s jobTimeout applies to tasks without one; a job within its timeout is untouched', async () => {
    const slow = await t.jobs.add('uses_default');
    const quick = await t.jobs.add('quick');
    await waitFor('the slow job to fail', () => events.some((e) => e.type === 'job:failed' && e.job.id === slow.id));
    assert.ok(isJobQueueError(defaultTimeoutReasons[0], 'JQ_JOB_TIMEOUT'));
    assert.match(String((defaultTimeoutReasons[0] as Error).message), /timeout of 300 ms/);
    await waitForValue(sql, 'the quick job to complete', 'select count(*)::int from job_queue.jobs where id = $1', 0, [quick.id]);
  });

  it('bad timeouts are refused at startup with their codes', async () => {
    @Injectable()
    class BadTimeout {
      @Task('bad_timeout', { timeout: 'soon' })
      async run() {}
    }
    await assert.rejects(createTestApp({ url: db.url, providers: [BadTimeout] }), (error) => {
      assert.ok(isJobQueueError(error, 'JQ_INVALID_TASK_OPTIONS'), String(error));
      assert.match((error as Error).message, /@Task\('bad_timeout'\) on BadTimeout\.run: timeout must be a duration/);
      return true;
    });
    for (const jobQueue of [{ jobTimeout: -1 }, { jobTimeout: '2 hours' }, { workerTimeout: '1s', heartbeatInterval: '1s' }, { heartbeatInterval: 5 }]) {
      await assert.rejects(createTestApp({ url: db.url, jobQueue }), (error) => isJobQueueError(error, 'JQ_INVALID_OPTIONS'), JSON.stringify(jobQueue));
    }
  });
});
