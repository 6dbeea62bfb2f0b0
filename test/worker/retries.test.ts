import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

const calls = new Map<string, number>();

@Injectable()
class FlakyTasks {
  @Task('always_fails', { maxAttempts: 3 })
  async alwaysFails(_payload: unknown, ctx: JobContext) {
    calls.set('always_fails', (calls.get('always_fails') ?? 0) + 1);
    throw new Error(`nope, attempt ${ctx.job.attempts}`);
  }

  @Task('fails_twice', { retryDelay: (attempts) => attempts * 10 })
  async failsTwice(_payload: unknown, ctx: JobContext) {
    calls.set('fails_twice', (calls.get('fails_twice') ?? 0) + 1);
    if (ctx.job.attempts <= 2) throw new Error('not yet');
    return 'done';
  }
}

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
        `select attempts, max_attempts, last_error, locked_at, locked_by, is_available,
                extract(epoch from (run_at - updated_at)) * 1000 as delay_ms
         from job_queue.jobs where id = $1`,
        [id],
      )
    ).rows[0];

  it('a failure records the error, unlocks the job and backs off exp(min(10, attempts)) seconds', async () => {
    const job = await t.jobs.add('always_fails');
    await t.worker.runUntilIdle();
    const first = await row(job.id);
    assert.equal(first.attempts, 1);
    assert.equal(first.last_error, 'nope, attempt 1');
    assert.equal(first.locked_at, null);
    assert.equal(first.locked_by, null);
    assert.ok(Math.abs(first.delay_ms - Math.exp(1) * 1000) < 50, `delay ${first.delay_ms} ms`);
    assert.deepEqual(events.filter((e) => 'job' in e && e.job.id === job.id).map((e) => e.type), ['job:start', 'job:error', 'job:complete']);

    await t.jobs.rescheduleJobs([job.id], { runAt: new Date() });
    await t.worker.runUntilIdle();
    const second = await row(job.id);
    assert.equal(second.attempts, 2);
    assert.ok(Math.abs(second.delay_ms - Math.exp(2) * 1000) < 50, `delay ${second.delay_ms} ms`);

    // the last attempt: the job stays, failed for good, with its error
    events.length = 0;
    await t.jobs.rescheduleJobs([job.id], { runAt: new Date() });
    await t.worker.runUntilIdle();
    const last = await row(job.id);
    assert.equal(last.attempts, 3);
    assert.equal(last.last_error, 'nope, attempt 3');
    assert.equal(last.is_available, false);
    assert.deepEqual(events.map((e) => e.type), ['job:start', 'job:failed', 'job:complete']);
    // nothing runs it again
    await t.jobs.rescheduleJobs([job.id], { runAt: new Date() });
    await t.worker.runUntilIdle();
    assert.equal(calls.get('always_fails'), 3);
  });

  it('a task’s own retry delay replaces the backoff; success after failures deletes the job', async () => {
    const job = await t.jobs.add('fails_twice');
    await t.worker.runUntilIdle();
    const first = await row(job.id);
    assert.ok(Math.abs(first.delay_ms - 10) < 20, `delay ${first.delay_ms} ms`);
    // run whatever is due until the job is gone: its two retries come 10 ms apart
    await waitFor('the job to succeed on its third attempt', async () => {
      await t.worker.runUntilIdle();
      return (await t.jobs.getJob(job.id)) === null;
    });
    assert.equal(calls.get('fails_twice'), 3);
    const success = events.find((e) => e.type === 'job:success' && e.job.id === job.id);
    assert.equal(success?.type === 'job:success' && success.result, 'done');
  });
});
