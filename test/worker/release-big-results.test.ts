import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { JobQueueDatabase } from '../../libs/job-queue/src/module/job-queue-database';
import { DEFAULT_MAX_JSON_BYTES } from '../../libs/job-queue/src/json';
import { releaseParameters } from '../../libs/job-queue/src/worker/release-parameters';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';

/**
 * A flush holds whatever finished since the last one, and each result may be as large as
 * maxJsonBytes (1 MiB by default). A jsonb value holds at most 256 MB (2^28 - 1 bytes), so
 * the results of one flush must not all go in one jsonb: a flush that cannot be written is
 * retried as it is, for ever, and its jobs stay locked. (Sent as a text[] of results, one
 * jsonb each, the flush wrote; this is about 300 MB of parameters: it takes a few seconds.)
 */
describe('a release of many large results', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => ({ db, sql, t } = await openTestApp('release_big_results', { jobQueue: { worker: false, externalTasks: '*' } })));
  after(() => closeTestApp({ db, sql, t }));

  it('writes 280 results of almost maxJsonBytes each in one flush', async () => {
    await sql.query(`insert into job_queue.workers (id) values ('big-worker')`);
    const { rows } = await sql.query<{ id: string }>(`
      insert into job_queue.jobs (task_identifier, locked_at, locked_by, started_at, attempts)
      select 'work', now(), 'big-worker', now(), 1 from generate_series(1, 280) returning id`);
    const result = JSON.stringify('x'.repeat(DEFAULT_MAX_JSON_BYTES - 16)); // what toJsonText lets through
    const batch = { completed: rows.map(({ id }) => ({ id, result })), failed: [], started: [], progress: new Map<string, string>() };
    const [written] = await t.app.get(JobQueueDatabase).run<{ released: number; busy: string[] }>('releaseJobs', releaseParameters('big-worker', batch, true));
    assert.deepEqual([written.released, written.busy], [280, []]);
    const { rows: kept } = await sql.query(`select count(*)::int as n, min(length(result #>> '{}'))::int as len from job_queue.finished_jobs where state = 'completed'`);
    assert.deepEqual(kept[0], { n: 280, len: DEFAULT_MAX_JSON_BYTES - 16 });
  });
});
