import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { waitFor, waitForNoJobs } from '../support/wait';

/** Per queue, what ran in which order: `<seq>` for a success, `<seq>!` for a failed attempt. */
const order = new Map<string, string[]>();

@Injectable()
class OrderTasks {
  /** Fails its first `fail` attempts. */
  @Task('step', { retryDelay: () => 300 })
  async step(payload: { queue: string; seq: number; fail?: number }, ctx: JobContext) {
    const log = order.get(payload.queue) ?? [];
    order.set(payload.queue, log);
    if (ctx.job.attempts <= (payload.fail ?? 0)) {
      log.push(`${payload.seq}!`);
      throw new Error(`step ${payload.seq} fails`);
    }
    log.push(String(payload.seq));
  }
}

describe('named queues through retries', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  const events: JobQueueEvent[] = [];

  before(async () => {
    ({ db, sql, t } = await openTestApp('queue_retries', { providers: [OrderTasks], jobQueue: { concurrency: 10 } }));
    t.worker.events$.subscribe((e) => events.push(e));
  });
  after(() => closeTestApp({ db, sql, t }));

  it('a head waiting for its retry keeps its queue waiting; one that fails for good lets the queue move on', async () => {
    await t.jobs.addMany([
      { identifier: 'step', queueName: 'billing', payload: { queue: 'billing', seq: 0, fail: 2 } },
      { identifier: 'step', queueName: 'billing', payload: { queue: 'billing', seq: 1 } },
      { identifier: 'step', queueName: 'billing', payload: { queue: 'billing', seq: 2, fail: 1 } },
      { identifier: 'step', queueName: 'billing', payload: { queue: 'billing', seq: 3 } },
      { identifier: 'step', queueName: 'sync', maxAttempts: 1, payload: { queue: 'sync', seq: 0, fail: 1 } },
      { identifier: 'step', queueName: 'sync', payload: { queue: 'sync', seq: 1 } },
      { identifier: 'step', queueName: 'sync', payload: { queue: 'sync', seq: 2 } },
      { identifier: 'step', payload: { queue: 'none', seq: 0 } },
    ]);
    await waitFor('every queue to be done', () => order.get('billing')?.length === 7 && order.get('sync')?.length === 3);
    assert.deepEqual(order.get('billing'), ['0!', '0!', '0', '1', '2!', '2', '3'], 'each retry ran before the jobs behind it');
    assert.deepEqual(order.get('sync'), ['0!', '1', '2'], 'a head that failed for good no longer holds its queue');
    assert.deepEqual(order.get('none'), ['0'], 'the job outside any queue ran meanwhile');
    const blocked = events.filter((e) => e.type === 'queue:blocked');
    assert.deepEqual(
      blocked.map((e) => e.type === 'queue:blocked' && [e.queueName, (e.job.payload as { seq: number }).seq, e.retryAt instanceof Date]),
      [['billing', 0, true], ['billing', 0, true], ['billing', 2, true]],
      'a queue held up by its failing head is announced',
    );
    // every job left jobs once its outcome was written: the failed head is kept in finished_jobs,
    // failed for good with its error; the rest completed
    await waitForNoJobs(sql);
    const { rows } = await sql.query(
      `select queue_name, (payload->>'seq')::int as seq, state, attempts, max_attempts, last_error, errors from job_queue.finished_jobs order by id`,
    );
    const attemptErrors = (errors: Array<{ attempt: number; message: string; code: string | null }> | null) => errors?.map((e) => [e.attempt, e.message, e.code]) ?? [];
    assert.deepEqual(
      rows.map((r) => [r.queue_name, r.seq, r.state, r.attempts, r.max_attempts, r.last_error, attemptErrors(r.errors)]),
      [
        ['billing', 0, 'completed', 3, 25, null, [[1, 'step 0 fails', null], [2, 'step 0 fails', null]]],
        ['billing', 1, 'completed', 1, 25, null, []],
        ['billing', 2, 'completed', 2, 25, null, [[1, 'step 2 fails', null]]],
        ['billing', 3, 'completed', 1, 25, null, []],
        ['sync', 0, 'failed', 1, 1, 'step 0 fails', [[1, 'step 0 fails', null]]],
        ['sync', 1, 'completed', 1, 25, null, []],
        ['sync', 2, 'completed', 1, 25, null, []],
        [null, 0, 'completed', 1, 25, null, []],
      ],
    );
  });

  it('jobs added by the SQL add_job keep the same rule', async () => {
    order.clear();
    await sql.query(`select job_queue.add_job('step', '{"queue": "sql", "seq": 0, "fail": 1}', queue_name => 'sql')`);
    await sql.query(`select job_queue.add_job('step', '{"queue": "sql", "seq": 1}', queue_name => 'sql')`);
    await waitFor('the sql queue to be done', () => order.get('sql')?.length === 3);
    assert.deepEqual(order.get('sql'), ['0!', '0', '1']);
    await sql.query(`delete from job_queue.jobs where queue_name = 'sync'`);
    await waitForNoJobs(sql);
  });
});
