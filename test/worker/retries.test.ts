import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { MAX_KEPT_ERRORS } from '../../libs/job-queue/src/sql/finished';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

/** The interval type holds whole microseconds: a delay in ms as PostgreSQL stores it. */
const toMicroseconds = (ms: number) => Math.round(ms * 1000) / 1000;

const calls = new Map<string, number>();
/** Set by a test: runs in fails_twice just before an attempt throws. */
let beforeFailing: ((jobId: string) => Promise<void>) | undefined;

@Injectable()
class FlakyTasks {
  @Task('always_fails', { maxAttempts: 3 })
  async alwaysFails(_payload: unknown, ctx: JobContext) {
    calls.set('always_fails', (calls.get('always_fails') ?? 0) + 1);
    throw new Error(`nope, attempt ${ctx.job.attempts}`);
  }

  /** An error whose text PostgreSQL cannot store as it is: U+0000, and half an emoji in its message and code. */
  @Task('odd_error')
  async oddError() {
    throw Object.assign(new Error('bad\u0000 byte and half an emoji: \ud83d'), { code: 'E\udc00ODD' });
  }

  @Task('fails_twice', { retryDelay: (attempts) => attempts * 10 })
  async failsTwice(_payload: unknown, ctx: JobContext) {
    calls.set('fails_twice', (calls.get('fails_twice') ?? 0) + 1);
    if (ctx.job.attempts <= 2) {
      await beforeFailing?.(ctx.job.id);
      throw new Error('not yet');
    }
    return 'done';
  }

  /** Fails every attempt, each retried at once but the one after PAUSE_AFTER: more failures than `errors` keeps. */
  @Task('fails_often', { maxAttempts: MAX_KEPT_ERRORS + 5, retryDelay: (attempts) => (attempts === PAUSE_AFTER ? 3_600_000 : 0) })
  async failsOften(_payload: unknown, ctx: JobContext) {
    throw new Error(`failure ${ctx.job.attempts}`);
  }
}

/** fails_often waits an hour after this many failures: the test reads its row in jobs then. */
const PAUSE_AFTER = MAX_KEPT_ERRORS + 3;

describe('retries and failures', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp;
  const events: JobQueueEvent[] = [];

  before(async () => {
    db = await createTestDatabase('retries');
    sql = await connect(db.url);
    t = await createTestApp({ url: db.url, providers: [FlakyTasks], jobQueue: { worker: false } });
    t.worker.events$.subscribe((e) => events.push(e));
  });
  after(async () => {
    await sql.end();
    await t.close();
    await db.drop();
  });

  const row = async (id: string) =>
    (
      await sql.query(
        `select attempts, max_attempts, last_error, locked_at, locked_by, is_available, errors,
                (extract(epoch from (run_at - updated_at)) * 1000)::float8 as delay_ms
         from job_queue.jobs where id = $1`,
        [id],
      )
    ).rows[0];
  const finishedRow = async (id: string) =>
    (await sql.query('select state, attempts, max_attempts, last_error, result, errors from job_queue.finished_jobs where id = $1', [id])).rows[0];
  /** A row's errors entries as [attempt, message, code], each checked to carry its time. */
  const attemptErrors = (errors: Array<{ at: string; attempt: number; message: string; code: string | null }>) =>
    errors.map((e) => {
      assert.ok(!Number.isNaN(Date.parse(e.at)), `errors entry ${e.attempt} has a time`);
      return [e.attempt, e.message, e.code];
    });

  it('a failure records the error, unlocks the job and backs off exp(min(10, attempts)) seconds', async () => {
    const job = await t.jobs.add('always_fails');
    await t.worker.runUntilIdle();
    const first = await row(job.id);
    assert.equal(first.attempts, 1);
    assert.equal(first.last_error, 'nope, attempt 1');
    assert.equal(first.locked_at, null);
    assert.equal(first.locked_by, null);
    assert.deepEqual(attemptErrors(first.errors), [[1, 'nope, attempt 1', null]], 'the failed attempt is recorded in errors');
    // releaseJobs sets run_at = now() + delay and updated_at = now() in one statement: the difference is the delay itself
    assert.equal(first.delay_ms, toMicroseconds(Math.exp(1) * 1000));
    assert.deepEqual(events.filter((e) => 'job' in e && e.job.id === job.id).map((e) => e.type), ['job:start', 'job:error', 'job:complete']);

    await t.jobs.rescheduleJobs([job.id], { runAt: new Date() });
    await t.worker.runUntilIdle();
    const second = await row(job.id);
    assert.equal(second.attempts, 2);
    assert.equal(second.delay_ms, toMicroseconds(Math.exp(2) * 1000));
    assert.deepEqual(attemptErrors(second.errors), [[1, 'nope, attempt 1', null], [2, 'nope, attempt 2', null]]);

    // the last attempt: the job leaves jobs for finished_jobs, failed for good, with its errors
    events.length = 0;
    await t.jobs.rescheduleJobs([job.id], { runAt: new Date() });
    await t.worker.runUntilIdle();
    assert.equal(await row(job.id), undefined, 'gone from jobs');
    const last = await finishedRow(job.id);
    assert.equal(last.state, 'failed');
    assert.deepEqual([last.attempts, last.max_attempts], [3, 3]);
    assert.equal(last.last_error, 'nope, attempt 3');
    assert.deepEqual(attemptErrors(last.errors), [[1, 'nope, attempt 1', null], [2, 'nope, attempt 2', null], [3, 'nope, attempt 3', null]]);
    assert.deepEqual(events.map((e) => e.type), ['job:start', 'job:failed', 'job:complete']);
    // nothing runs it again: rescheduling a finished job does nothing
    assert.deepEqual(await t.jobs.rescheduleJobs([job.id], { runAt: new Date() }), []);
    await t.worker.runUntilIdle();
    assert.equal(calls.get('always_fails'), 3);
    assert.equal((await finishedRow(job.id)).state, 'failed');
  });

  it(`a job that fails more than ${MAX_KEPT_ERRORS} times keeps its latest ${MAX_KEPT_ERRORS} errors, in order, in jobs and in finished_jobs`, async () => {
    const job = await t.jobs.add('fails_often');
    /** The entries of the latest MAX_KEPT_ERRORS failures up to `last`, as attemptErrors gives them. */
    const latest = (last: number) =>
      Array.from({ length: MAX_KEPT_ERRORS }, (_, i) => last - MAX_KEPT_ERRORS + 1 + i).map((attempt) => [attempt, `failure ${attempt}`, null]);
    // Each retry is due at once: runUntilIdle runs them all, but a loaded machine may return between two.
    await waitFor(`${PAUSE_AFTER} failed attempts`, async () => {
      await t.worker.runUntilIdle();
      return (await row(job.id)).attempts === PAUSE_AFTER;
    });
    const waiting = await row(job.id);
    assert.equal(waiting.locked_by, null);
    assert.deepEqual(attemptErrors(waiting.errors), latest(PAUSE_AFTER), 'the retries kept the latest errors in jobs');

    await t.jobs.rescheduleJobs([job.id], { runAt: new Date() });
    await waitFor('every attempt to fail', async () => {
      await t.worker.runUntilIdle();
      return (await finishedRow(job.id)) !== undefined;
    });
    const last = await finishedRow(job.id);
    const attempts = MAX_KEPT_ERRORS + 5;
    assert.deepEqual([last.state, last.attempts, last.last_error], ['failed', attempts, `failure ${attempts}`]);
    assert.deepEqual(attemptErrors(last.errors), latest(attempts), 'the last failure appended, the oldest ones dropped');
  });

  it('an error message or code PostgreSQL cannot store as it is: U+0000 dropped, a lone surrogate made U+FFFD', async () => {
    const job = await t.jobs.add('odd_error');
    await t.worker.runUntilIdle();
    const failed = await row(job.id);
    assert.equal(failed.attempts, 1, 'the failure was written');
    assert.equal(failed.last_error, 'bad byte and half an emoji: \ufffd');
    assert.deepEqual(attemptErrors(failed.errors), [[1, 'bad byte and half an emoji: \ufffd', 'E\ufffdODD']]);
  });

  it('a task’s own retry delay replaces the backoff; success after failures moves the job to finished_jobs, completed, with the errors of its failed attempts', async () => {
    // The retries are due 10 and 20 ms after each failure, so the test must stop the next
    // attempt from running before it has read the row. Just before each failure the handler
    // takes FOR KEY SHARE on the job's row from a connection of the test's: the release (an
    // UPDATE of no key column) is not blocked by it, but the claim (FOR UPDATE SKIP LOCKED)
    // passes the row over, so runUntilIdle returns with the released job waiting.
    const holder = await connect(db.url);
    beforeFailing = async (jobId) => {
      await holder.query('begin');
      await holder.query('select 1 from job_queue.jobs where id = $1 for key share', [jobId]);
    };
    const letGo = () => holder.query('rollback');
    try {
      const job = await t.jobs.add('fails_twice');
      await t.worker.runUntilIdle();
      const first = await row(job.id);
      assert.equal(calls.get('fails_twice'), 1);
      assert.deepEqual([first.attempts, first.last_error, first.locked_by], [1, 'not yet', null]);
      assert.equal(first.delay_ms, 10, 'retryDelay(1) = 10 ms, not the backoff');
      await letGo();

      // due 10 ms later, run by the same claim as any job
      await waitFor('the second attempt', async () => {
        await t.worker.runUntilIdle();
        return calls.get('fails_twice') === 2;
      });
      const second = await row(job.id);
      assert.deepEqual([second.attempts, second.last_error, second.locked_by], [2, 'not yet', null]);
      assert.equal(second.delay_ms, 20, 'retryDelay(2) = 20 ms');
      await letGo();

      await waitFor('the job to succeed on its third attempt', async () => {
        await t.worker.runUntilIdle();
        return (await t.jobs.getJob(job.id))?.state === 'completed';
      });
      assert.equal(calls.get('fails_twice'), 3);
      assert.equal(await row(job.id), undefined, 'gone from jobs');
      const done = await finishedRow(job.id);
      assert.deepEqual([done.state, done.attempts, done.last_error, done.result], ['completed', 3, null, 'done']);
      assert.deepEqual(attemptErrors(done.errors), [[1, 'not yet', null], [2, 'not yet', null]], 'the failed attempts are kept');
      const success = events.find((e) => e.type === 'job:success' && e.job.id === job.id);
      assert.equal(success?.type === 'job:success' && success.result, 'done');
    } finally {
      beforeFailing = undefined;
      await holder.end();
    }
  });
});
