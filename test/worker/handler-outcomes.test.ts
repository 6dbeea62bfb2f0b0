import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { isJobQueueError, PermanentJobError, SnoozeJob, Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { MAX_KEPT_ERRORS } from '../../libs/job-queue/src/sql/finished';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { waitFor } from '../support/wait';

const runs = new Map<string, number>();
const count = (ctx: JobContext) => {
  const n = (runs.get(ctx.job.id) ?? 0) + 1;
  runs.set(ctx.job.id, n);
  return n;
};

@Injectable()
class OutcomeTasks {
  /** Five attempts allowed, but the payload can never work: it fails for good at once. */
  @Task('unfixable', { maxAttempts: 5 })
  unfixable(_payload: unknown, ctx: JobContext) {
    count(ctx);
    throw new PermanentJobError('the account was deleted');
  }

  /** One attempt allowed, snoozed twice before it runs: snoozes spend no attempt. */
  @Task('rate_limited', { maxAttempts: 1 })
  rateLimited(_payload: unknown, ctx: JobContext) {
    if (count(ctx) <= 2) throw new SnoozeJob(20, 'rate limited, try again shortly');
    return { sent: true };
  }

  /** Snoozed SNOOZES times, each at once, then runs: more snoozes than `errors` keeps. */
  @Task('snoozes_often', { maxAttempts: 1 })
  snoozesOften(_payload: unknown, ctx: JobContext) {
    const run = count(ctx);
    if (run <= SNOOZES) throw new SnoozeJob(0, `snooze ${run}`);
    return 'ran';
  }

  /** Snoozed for an hour at its first run; a second run (which must not come before then) completes it. */
  @Task('snoozed_an_hour', { maxAttempts: 3 })
  snoozedAnHour(_payload: unknown, ctx: JobContext) {
    if (count(ctx) === 1) throw new SnoozeJob('1h', 'back in an hour');
    return 'ran';
  }

  @Task('ready')
  ready(_payload: unknown, ctx: JobContext) {
    count(ctx);
  }
}

const SNOOZES = MAX_KEPT_ERRORS + 5;

/** A handler ending its job for good, or snoozing it: the rows, the runs and the events say so. */
describe('handler outcomes: PermanentJobError and SnoozeJob', () => {
  let ctx: TestAppContext;
  const events: JobQueueEvent[] = [];
  before(async () => {
    ctx = await openTestApp('handler_outcomes', { providers: [OutcomeTasks], jobQueue: { pollInterval: 50 } });
    ctx.t.worker.events$.subscribe((event) => events.push(event));
  });
  after(() => closeTestApp(ctx));

  const finishedRow = async (id: string) =>
    (await ctx.sql.query(`select state, attempts, max_attempts, last_error, errors from job_queue.finished_jobs where id = $1`, [id])).rows[0];

  it('PermanentJobError fails the job for good on its first attempt, whatever attempts it had left', async () => {
    const job = await ctx.t.jobs.add('unfixable', {});
    await waitFor('the job to fail', async () => (await finishedRow(job.id)) !== undefined);
    const row = await finishedRow(job.id);
    assert.deepEqual(
      { state: row.state, attempts: row.attempts, max: row.max_attempts, lastError: row.last_error, codes: row.errors.map((e: { code: string }) => e.code) },
      { state: 'failed', attempts: 1, max: 5, lastError: 'JQ_JOB_FAILED_FOR_GOOD: the account was deleted', codes: ['JQ_JOB_FAILED_FOR_GOOD'] },
    );
    assert.equal(runs.get(job.id), 1, 'run once');
    assert.deepEqual(events.filter((e) => e.type === 'job:failed' && e.job.id === job.id).length, 1);
    assert.ok(!events.some((e) => e.type === 'job:error' && e.job.id === job.id), 'no retry announced');
  });

  it('SnoozeJob runs the job again later without spending an attempt, even its only one; each snooze is recorded', async () => {
    const job = await ctx.t.jobs.add('rate_limited', {});
    await waitFor('the job to complete', async () => (await finishedRow(job.id))?.state === 'completed');
    const row = await finishedRow(job.id);
    assert.equal(runs.get(job.id), 3, 'two snoozes, then the run that completed');
    assert.equal(row.attempts, 1, 'the snoozes spent no attempt');
    assert.deepEqual(row.errors.map((e: { code: string; message: string }) => [e.code, e.message]), [
      ['JQ_JOB_SNOOZED', 'JQ_JOB_SNOOZED: rate limited, try again shortly'],
      ['JQ_JOB_SNOOZED', 'JQ_JOB_SNOOZED: rate limited, try again shortly'],
    ]);
    const snoozed = events.filter((e): e is Extract<JobQueueEvent, { type: 'job:snoozed' }> => e.type === 'job:snoozed' && e.job.id === job.id);
    assert.equal(snoozed.length, 2);
    assert.ok(!events.some((e) => (e.type === 'job:error' || e.type === 'job:failed') && e.job.id === job.id));
  });

  it(`a job snoozed more than ${MAX_KEPT_ERRORS} times keeps its latest ${MAX_KEPT_ERRORS} errors, in order`, async () => {
    const job = await ctx.t.jobs.add('snoozes_often', {});
    const messages = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `JQ_JOB_SNOOZED: snooze ${from + i}`);
    await waitFor('the job to complete', async () => (await finishedRow(job.id))?.state === 'completed');
    const row = await finishedRow(job.id);
    assert.equal(runs.get(job.id), SNOOZES + 1);
    assert.deepEqual(
      row.errors.map((e: { code: string; message: string }) => [e.code, e.message]),
      messages(SNOOZES - MAX_KEPT_ERRORS + 1, SNOOZES).map((message) => ['JQ_JOB_SNOOZED', message]),
      `the latest ${MAX_KEPT_ERRORS} snoozes, oldest first (a completed job takes its errors from its row in jobs, where each snooze was recorded)`,
    );
  });

  it("SnoozeJob('1h') puts the job an hour ahead with its attempt given back, and the next runUntilIdle() does not run it", async () => {
    const { rows: [{ before }] } = await ctx.sql.query(`select now()::text as before`);
    const job = await ctx.t.jobs.add('snoozed_an_hour', {});
    const snoozed = async () => {
      const got = await ctx.t.jobs.getJob(job.id);
      return got !== null && got.lockedBy === null && got.errors.length > 0;
    };
    await waitFor('the snooze to be written', snoozed);
    const { rows } = await ctx.sql.query(
      `select finished, attempts, errors->0->>'code' as code,
              run_at >= $2::timestamptz + interval '1 hour' as not_sooner, run_at <= now() + interval '1 hour' as not_later
       from (select false as finished, run_at, attempts, errors from job_queue.jobs where id = $1
             union all select true, run_at, attempts, errors from job_queue.finished_jobs where id = $1) job`,
      [job.id, before],
    );
    assert.deepEqual(
      rows,
      [{ finished: false, attempts: 0, code: 'JQ_JOB_SNOOZED', not_sooner: true, not_later: true }],
      'run_at one hour after the snooze (between the add and now, plus an hour), attempts as before the run',
    );
    assert.ok(events.some((e) => e.type === 'job:snoozed' && e.job.id === job.id), 'job:snoozed emitted');

    const later = await ctx.t.jobs.add('ready', {});
    await ctx.t.worker.runUntilIdle();
    assert.equal(runs.get(later.id), 1, 'a job added after the snooze ran: the worker claimed after it');
    assert.equal(runs.get(job.id), 1, 'the snoozed job did not run again');
    assert.equal((await ctx.t.jobs.getJob(job.id))?.state, 'scheduled');
  });

  it('a snooze delay that is not a duration is refused where it is thrown', () => {
    assert.throws(() => new SnoozeJob('soon'), (error) => isJobQueueError(error, 'JQ_INVALID_SPEC'));
    assert.throws(() => new SnoozeJob(-1), (error) => isJobQueueError(error, 'JQ_INVALID_SPEC'));
    assert.equal(new SnoozeJob('1m').delayMs, 60_000);
  });
});
