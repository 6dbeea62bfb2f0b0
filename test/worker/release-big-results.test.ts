import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../../libs/job-queue/src/core/options';
import { JobQueueDatabase } from '../../libs/job-queue/src/db/job-queue-database';
import { DEFAULT_MAX_JSON_BYTES, MAX_JSON_BYTES_LIMIT, toJsonText } from '../../libs/job-queue/src/core/json';
import { ReleaseBatcher } from '../../libs/job-queue/src/worker/release-batcher';
import { writeReleases } from '../../libs/job-queue/src/worker/release-parameters';
import { claimTokenOf } from '../../libs/job-queue/src/sql/release';
import { errorMessage, MAX_ERROR_MESSAGE_CHARS } from '../../libs/job-queue/src/core/job-outcome';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';

/**
 * A flush holds whatever finished since the last one, and each result may be as large as
 * maxJsonBytes (1 MiB by default). releaseJobs takes a flush's results as one jsonb, and a
 * jsonb value holds at most 256 MiB: the batcher splits what finished into flushes small
 * enough, or a flush that cannot be written would be retried as it is, for ever, its jobs
 * locked. (About 300 MB of results: it takes a few seconds.)
 */
describe('a release of many large results', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(
    async () =>
      ({ db, sql, t } = await openTestApp('release_big_results', { jobQueue: { worker: false, externalTasks: '*', maxJsonBytes: MAX_JSON_BYTES_LIMIT } })),
  );
  after(() => closeTestApp({ db, sql, t }));

  it('writes 280 results of almost maxJsonBytes each, finished at once, and long error messages cut', async () => {
    await sql.query(`insert into job_queue.workers (id) values ('big-worker')`);
    const { rows } = await sql.query<{ id: string; claim: string }>(`
      insert into job_queue.jobs (task_identifier, locked_at, locked_by, started_at, attempts)
      select 'work', now(), 'big-worker', now(), 1 from generate_series(1, 290) returning id, ${claimTokenOf('jobs')} as claim`);
    const database = t.app.get(JobQueueDatabase);
    const errors: unknown[] = [];
    let flushes = 0;
    const write = writeReleases(database, 'big-worker', true, () => null);
    const batcher = new ReleaseBatcher(
      (batch) => {
        flushes += 1;
        return write(batch);
      },
      (error) => errors.push(error),
    );
    const result = JSON.stringify('x'.repeat(DEFAULT_MAX_JSON_BYTES - 16)); // what toJsonText lets through
    for (const { id, claim } of rows.slice(0, 280)) batcher.complete({ id, claim, result });
    for (const { id, claim } of rows.slice(280)) batcher.fail({ id, claim, error: errorMessage(new Error('y'.repeat(10_000_000))), code: null, delayMs: 0 });
    await batcher.stop();

    assert.deepEqual(errors, [], 'no flush failed');
    assert.ok(flushes > 1, `split into flushes (${flushes})`);
    const { rows: kept } = await sql.query(`select count(*)::int as n, min(length(result #>> '{}'))::int as len from job_queue.finished_jobs where state = 'completed'`);
    assert.deepEqual(kept[0], { n: 280, len: DEFAULT_MAX_JSON_BYTES - 16 });
    const { rows: retried } = await sql.query(`select count(*)::int as n, max(length(last_error))::int as len from job_queue.jobs where locked_by is null and last_error like 'yyy%…'`);
    assert.deepEqual(retried[0], { n: 10, len: MAX_ERROR_MESSAGE_CHARS }, 'failures written, their messages cut');
  });

  it('writes a result as large as the largest maxJsonBytes allows, of the JSON that takes the most jsonb (small numbers)', async () => {
    await sql.query(`insert into job_queue.workers (id) values ('huge-worker')`);
    const { rows } = await sql.query<{ id: string; claim: string }>(`
      insert into job_queue.jobs (task_identifier, locked_at, locked_by, started_at, attempts)
      values ('work', now(), 'huge-worker', now(), 1) returning id, ${claimTokenOf('jobs')} as claim`);
    const [{ id, claim }] = rows;
    const database = t.app.get(JobQueueDatabase);
    assert.equal(t.app.get<ResolvedJobQueueOptions>(JOB_QUEUE_OPTIONS).maxJsonBytes, MAX_JSON_BYTES_LIMIT, 'the app starts with the largest maxJsonBytes');
    // [1,1,…,1]: 2 characters a number, each number about 12 bytes of jsonb (6 a character, the most there is)
    const numbers = MAX_JSON_BYTES_LIMIT / 2 - 1; // n numbers: 2n + 1 characters
    const result = toJsonText(new Array<number>(numbers).fill(1), 'the result', t.app.get<ResolvedJobQueueOptions>(JOB_QUEUE_OPTIONS).maxJsonBytes, { notJson: 'JQ_RESULT_NOT_JSON', tooLarge: 'JQ_RESULT_TOO_LARGE' }, 'null');
    assert.equal(result.length, MAX_JSON_BYTES_LIMIT - 1, 'just under the limit, and let through');
    const errors: unknown[] = [];
    const batcher = new ReleaseBatcher(writeReleases(database, 'huge-worker', true, () => null), (error) => errors.push(error));
    batcher.complete({ id, claim, result });
    await batcher.stop();

    assert.deepEqual(errors, [], 'the flush was written the first time');
    const { rows: kept } = await sql.query(`select state, jsonb_array_length(result) as n from job_queue.finished_jobs where id = $1`, [id]);
    assert.deepEqual(kept, [{ state: 'completed', n: numbers }]);
    assert.equal((await sql.query('select count(*)::int as n from job_queue.jobs where id = $1', [id])).rows[0].n, 0);
  });
});
