import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client, PoolClient } from 'pg';
import { JobQueueDatabase } from '../../libs/job-queue/src/db/job-queue-database';
import { claimTokenOf } from '../../libs/job-queue/src/sql/release';
import { writeReleases } from '../../libs/job-queue/src/worker/release-parameters';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';

/**
 * Under a steady load a worker's flushes hold a job or a few, and node-pg's named releaseJobs,
 * left to plan_cache_mode = auto, was given a custom plan at every one of them: planning took
 * 4 ms where the run took 1. The release runs with its generic plan, made once per connection
 * (JobQueueDatabase.runGenericPlan).
 */
describe('the release of a few jobs at a time', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => ({ db, sql, t } = await openTestApp('release_generic_plan', { jobQueue: { worker: false, externalTasks: '*' } })));
  after(() => closeTestApp({ db, sql, t }));

  it('uses its generic plan from the first flush on, on every connection, and writes each flush', async () => {
    await sql.query(`insert into job_queue.workers (id) values ('steady-worker')`);
    const { rows: held } = await sql.query<{ id: string; claim: string }>(`
      insert into job_queue.jobs (task_identifier, locked_at, locked_by, started_at, attempts)
      select 'work', now(), 'steady-worker', now(), 1 from generate_series(1, 12) returning id, ${claimTokenOf('jobs')} as claim`);
    const database = t.app.get(JobQueueDatabase);
    const write = writeReleases(database, 'steady-worker', true, () => null);
    const empty = { completed: [], failed: [], started: [], progress: new Map<string, string>(), claims: new Map<string, string>() };
    // one completion a flush, as a worker that keeps up writes them; every third flush two at once
    for (let i = 0; i < held.length; ) {
      const take = i % 3 === 2 ? 2 : 1;
      const completed = held.slice(i, i + take).map(({ id, claim }) => ({ id, claim: claim as never, result: `{"n":${i}}` }));
      const written = await write({ ...empty, completed });
      assert.deepEqual([written.busy, written.cancelled], [[], []]);
      i += take;
    }
    const { rows: finished } = await sql.query<{ n: string }>(`select count(*) as n from job_queue.finished_jobs where state = 'completed' and result ? 'n'`);
    assert.equal(Number(finished[0].n), 12, 'every flush written');
    assert.equal(Number((await sql.query<{ n: string }>('select count(*) as n from job_queue.jobs')).rows[0].n), 0);

    // Every connection the pool holds, idle now: how often each planned the release, and how.
    const pool = database.pool;
    const clients: PoolClient[] = [];
    try {
      for (let i = 0; i < pool.idleCount + clients.length && i < 20; i++) clients.push(await pool.connect());
      const plans = { connections: 0, generic: 0, custom: 0 };
      for (const client of clients) {
        const { rows } = await client.query<{ generic: number; custom: number }>(
          `select generic_plans::int as generic, custom_plans::int as custom from pg_prepared_statements where name ilike '%releasejobs%'`,
        );
        for (const row of rows) {
          plans.connections += 1;
          plans.generic += row.generic;
          plans.custom += row.custom;
        }
      }
      assert.ok(plans.connections >= 1, JSON.stringify(plans));
      // its planning (an EXPLAIN) once on each connection, then once per flush
      assert.deepEqual(plans, { connections: plans.connections, generic: 9 + plans.connections, custom: 0 }, 'the generic plan used at each flush, no custom plan made');
    } finally {
      for (const client of clients) client.release();
    }
  });
});
