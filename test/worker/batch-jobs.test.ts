import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { DataSource } from 'typeorm';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { waitFor } from '../support/wait';

/** A task no worker of this app runs (externalTasks): its jobs wait, unlocked, for as long as the test needs. */
const ELSEWHERE = 'batch_elsewhere';

type Element = { n: number; failUntil?: number };
const gates = new Map<string, () => void>();

@Injectable()
class BatchTasks {
  constructor(private readonly dataSource: DataSource) {}

  /**
   * One promise per element: each records its run in the test's `batch_runs` and rejects while
   * the attempt is at most its `failUntil`, else resolves with `n * 10`. Retried in an hour
   * (the test reschedules it), so that the row between attempts can be looked at.
   */
  @Task('deliver', { maxAttempts: 5, retryDelay: () => 3_600_000 })
  async deliver(payload: Element[], ctx: JobContext) {
    return payload.map(async (element) => {
      await this.dataSource.query('insert into batch_runs (job_id, n, attempt) values ($1, $2, $3)', [ctx.job.id, element.n, ctx.job.attempts]);
      if (ctx.job.attempts <= (element.failUntil ?? 0)) throw new Error(`element ${element.n} failed`);
      return element.n * 10;
    });
  }

  /** deliver's elements with one attempt only: a partial failure is its last. */
  @Task('deliver_once', { maxAttempts: 1 })
  deliverOnce(payload: Element[], ctx: JobContext) {
    return this.deliver(payload, ctx);
  }

  /** Holds until the test opens its gate, then returns its payload: a keyed job a worker holds. */
  @Task('held_batch')
  async heldBatch(payload: number[], ctx: JobContext) {
    await new Promise<void>((resolve) => gates.set(ctx.job.id, resolve));
    return payload;
  }

  /** Promises for a payload that is not an array of as many elements: a rejection fails the whole attempt. */
  @Task('not_a_batch', { maxAttempts: 1 })
  notABatch() {
    return [Promise.resolve(1), Promise.reject(new Error('the second failed'))];
  }
}

/**
 * Batch jobs (graphile-worker's): array payloads of a waiting keyed job merge on add; a
 * handler that returns one promise per element has its job retried with only the elements
 * that failed.
 */
describe('batch jobs', () => {
  let ctx: TestAppContext;
  let sql: Client;
  before(async () => {
    ctx = await openTestApp('batch_jobs', { providers: [BatchTasks], jobQueue: { pollInterval: 50, externalTasks: [ELSEWHERE] } });
    sql = ctx.sql;
    await sql.query('create table batch_runs (k serial, job_id bigint not null, n int not null, attempt int not null)');
  });
  beforeEach(() => sql.query('delete from job_queue.jobs'));
  after(async () => {
    for (const open of gates.values()) open();
    await closeTestApp(ctx);
  });

  const keyed = async (key: string) =>
    (await sql.query('select id::text, payload, revision, run_at, locked_by from job_queue.jobs where key = $1', [key])).rows;
  const runsOf = async (jobId: string) =>
    (await sql.query('select n, attempt from batch_runs where job_id = $1 order by n, attempt', [jobId])).rows.map((r) => `${r.n}@${r.attempt}`);
  const row = async (jobId: string) =>
    (await sql.query(`select payload, attempts, last_error, errors, locked_by from job_queue.jobs where id = $1`, [jobId])).rows[0];
  const finishedRow = async (jobId: string) =>
    (await sql.query(`select state, payload, result, attempts, errors from job_queue.finished_jobs where id = $1`, [jobId])).rows[0];
  /** Waits until the job's failed attempt `attempt` is written: unlocked, `attempt` errors. */
  const failedAttempt = (jobId: string, attempt: number) =>
    waitFor(`job ${jobId}'s attempt ${attempt} to fail`, async () => {
      const r = await row(jobId);
      return r !== undefined && r.locked_by === null && (r.errors?.length ?? 0) === attempt;
    });

  it('adding under the key of a waiting job whose payload is an array appends the new elements (replace, preserve_run_at, addMany, SQL)', async () => {
    const { jobs } = ctx.t;
    const first = await jobs.add(ELSEWHERE, [1, 2], { jobKey: 'merge' });
    const again = await jobs.add(ELSEWHERE, [3], { jobKey: 'merge' });
    assert.equal(again.id, first.id, 'the same job');
    assert.deepEqual((await keyed('merge')).map((r) => [r.payload, r.revision]), [[[1, 2, 3], 1]]);

    await jobs.addMany([{ identifier: ELSEWHERE, payload: [4, { five: 5 }], jobKey: 'merge' }]);
    const later = new Date(Date.now() + 3_600_000);
    await sql.query(`select job_queue.add_job($1, '[6]'::jsonb, job_key => 'merge', run_at => $2)`, [ELSEWHERE, later]);
    assert.equal((await keyed('merge'))[0].run_at.getTime(), later.getTime(), 'replace takes the new run_at');
    await jobs.add(ELSEWHERE, [7], { jobKey: 'merge', jobKeyMode: 'preserve_run_at', runAt: new Date(Date.now() + 7_200_000) });
    const [merged] = await keyed('merge');
    assert.deepEqual(merged.payload, [1, 2, 3, 4, { five: 5 }, 6, 7], 'every array appended, in order');
    assert.equal(merged.run_at.getTime(), later.getTime(), 'preserve_run_at kept the run_at it had');

    await jobs.add(ELSEWHERE, [8], { jobKey: 'merge', jobKeyMode: 'unsafe_dedupe' });
    assert.deepEqual((await keyed('merge'))[0].payload, [1, 2, 3, 4, { five: 5 }, 6, 7], 'unsafe_dedupe leaves the waiting job alone');
    await jobs.add(ELSEWHERE, { not: 'an array' }, { jobKey: 'merge' });
    assert.deepEqual((await keyed('merge'))[0].payload, { not: 'an array' }, 'a payload that is not an array replaces it');
    await jobs.add(ELSEWHERE, [9], { jobKey: 'merge' });
    assert.deepEqual((await keyed('merge'))[0].payload, [9], 'and an array replaces an object');
  });

  it('once a worker holds the keyed job, an add makes a new job with only the new elements; the running one keeps its own', async () => {
    const running = await ctx.t.jobs.add('held_batch', [1, 2], { jobKey: 'held' });
    await waitFor('the worker to start the keyed job', () => gates.has(running.id));
    const added = await ctx.t.jobs.add('held_batch', [3], { jobKey: 'held' });
    assert.notEqual(added.id, running.id);
    const { rows } = await sql.query('select j.id::text, j.payload, j.key, j.locked_by is not null as held from job_queue.jobs j where j.id = any($1::bigint[]) order by j.id', [[running.id, added.id]]);
    assert.deepEqual(rows, [
      { id: running.id, payload: [1, 2], key: null, held: true },
      { id: added.id, payload: [3], key: 'held', held: rows[1].held },
    ]);
    gates.get(running.id)!();
    await waitFor('the new job to start', () => gates.has(added.id));
    gates.get(added.id)!();
    await waitFor('both to complete', async () => (await finishedRow(running.id))?.state === 'completed' && (await finishedRow(added.id))?.state === 'completed');
    assert.deepEqual([(await finishedRow(running.id)).result, (await finishedRow(added.id)).result], [[1, 2], [3]]);
  });

  it('a partial success retries only the elements that failed; those that succeeded never run again; all resolved completes with their values', async () => {
    const payload: Element[] = [{ n: 1 }, { n: 2, failUntil: 1 }, { n: 3 }, { n: 4, failUntil: 2 }];
    const job = await ctx.t.jobs.add('deliver', payload);
    await failedAttempt(job.id, 1);
    const first = await row(job.id);
    assert.deepEqual(first.payload, [{ n: 2, failUntil: 1 }, { n: 4, failUntil: 2 }], 'the retry carries the elements that failed');
    assert.deepEqual(
      { attempts: first.attempts, code: first.errors[0].code, lastError: first.last_error },
      { attempts: 1, code: 'JQ_BATCH_FAILED', lastError: 'JQ_BATCH_FAILED: 2 of 4 elements of the batch failed: element 2 failed; element 4 failed' },
    );

    await ctx.t.jobs.rescheduleJobs([job.id], { runAt: new Date() });
    await failedAttempt(job.id, 2);
    assert.deepEqual((await row(job.id)).payload, [{ n: 4, failUntil: 2 }]);

    await ctx.t.jobs.rescheduleJobs([job.id], { runAt: new Date() });
    await waitFor('the job to complete', async () => (await finishedRow(job.id))?.state === 'completed');
    const done = await finishedRow(job.id);
    assert.deepEqual({ attempts: done.attempts, result: done.result, payload: done.payload }, { attempts: 3, result: [40], payload: [{ n: 4, failUntil: 2 }] });
    assert.deepEqual(await runsOf(job.id), ['1@1', '2@1', '2@2', '3@1', '4@1', '4@2', '4@3'], 'each element ran until it succeeded, and never after');

    const easy = await ctx.t.jobs.add('deliver', [{ n: 5 }, { n: 6 }]);
    await waitFor('the easy batch to complete', async () => (await finishedRow(easy.id))?.state === 'completed');
    assert.deepEqual((await finishedRow(easy.id)).result, [50, 60], 'all resolved: the array of their values');
  });

  it('a partial failure on the last attempt fails the job for good, with the elements that failed as its payload', async () => {
    const job = await ctx.t.jobs.add('deliver_once', [{ n: 1 }, { n: 2, failUntil: 1 }]);
    await waitFor('the job to fail', async () => (await finishedRow(job.id))?.state === 'failed');
    const done = await finishedRow(job.id);
    assert.deepEqual({ payload: done.payload, codes: done.errors.map((e: { code: string }) => e.code) }, { payload: [{ n: 2, failUntil: 1 }], codes: ['JQ_BATCH_FAILED'] });
  });

  it('promises for a payload that is not an array as long: a rejection fails the attempt, and the payload stays', async () => {
    const job = await ctx.t.jobs.add('not_a_batch', { one: 'object' });
    await waitFor('the job to fail', async () => (await finishedRow(job.id))?.state === 'failed');
    const done = await finishedRow(job.id);
    assert.deepEqual(
      { payload: done.payload, error: done.errors[0].message },
      { payload: { one: 'object' }, error: 'JQ_BATCH_FAILED: 1 of 2 elements of the batch failed: the second failed' },
    );
  });
});
