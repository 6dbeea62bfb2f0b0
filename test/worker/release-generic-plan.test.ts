import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client, PoolClient } from 'pg';
import { JobQueueDatabase } from '../../libs/job-queue/src/db/job-queue-database';
import { writeReleases } from '../../libs/job-queue/src/worker/release-parameters';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { emptyBatch, insertHeldJobs } from '../support/held-jobs';

/**
 * Under a steady load a worker's flushes hold a job or a few, and node-pg's named releaseJobs,
 * left to plan_cache_mode = auto, was given a custom plan at every one of them (5.2 ms planning
 * where running it took 1.7). The release runs with its generic plan, made once per connection,
 * in one message whose values are written as literals (JobQueueDatabase.runGenericPlan).
 */
describe('the release of a few jobs at a time', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  let database: JobQueueDatabase;

  before(async () => {
    ({ db, sql, t } = await openTestApp('release_generic_plan', { jobQueue: { worker: false, externalTasks: '*' } }));
    database = t.app.get(JobQueueDatabase);
    await sql.query(`insert into job_queue.workers (id) values ('steady-worker')`);
  });
  after(() => closeTestApp({ db, sql, t }));

  const empty = emptyBatch;

  /** `count` jobs held by steady-worker, with their claims. */
  const held = (count: number) => insertHeldJobs(sql, 'steady-worker', count);

  /** How often the pool's idle connections planned the release, and how. */
  async function releasePlans(): Promise<{ connections: number; generic: number; custom: number }> {
    const pool = database.pool;
    const clients: PoolClient[] = [];
    try {
      for (let idle = pool.idleCount; clients.length < idle; ) clients.push(await pool.connect());
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
      return plans;
    } finally {
      for (const client of clients) client.release();
    }
  }

  it('uses its generic plan from the first flush on, on every connection, and writes each flush', async () => {
    const jobs = await held(12);
    const write = writeReleases(database, 'steady-worker', true, () => null);
    // one completion a flush, as a worker that keeps up writes them; every third flush two at once
    let flushes = 0;
    for (let i = 0; i < jobs.length; flushes++) {
      const take = i % 3 === 2 ? 2 : 1;
      const completed = jobs.slice(i, i + take).map(({ id, claim }) => ({ id, claim, result: `{"n":${i}}` }));
      const written = await write({ ...empty(), completed });
      assert.deepEqual([written.busy, written.cancelled], [[], []]);
      i += take;
    }
    // and four flushes at once: four connections
    const more = await held(8);
    await Promise.all([0, 2, 4, 6].map((i) => write({ ...empty(), completed: more.slice(i, i + 2).map(({ id, claim }) => ({ id, claim, result: '{"n":-1}' })) })));
    flushes += 4;
    const { rows } = await sql.query<{ n: number }>(`select count(*)::int as n from job_queue.finished_jobs where state = 'completed' and result ? 'n'`);
    assert.equal(rows[0].n, 20, 'every flush written');
    assert.equal((await sql.query<{ n: number }>('select count(*)::int as n from job_queue.jobs')).rows[0].n, 0);
    const plans = await releasePlans();
    assert.ok(plans.connections >= 2, JSON.stringify(plans));
    // its planning (an EXPLAIN) once on each connection, then once per flush
    assert.deepEqual(plans, { connections: plans.connections, generic: flushes + plans.connections, custom: 0 }, 'the generic plan used at each flush, no custom plan made');
  });

  it('writes results, errors and progress with quotes, backslashes and any script exactly, completions not kept, and a flush written again', async () => {
    await sql.query('truncate job_queue.finished_jobs');
    const text = `it's "quoted" \\ back\\slashed \\n ${'\u00e9\u4e2d\ud83d\ude00'} $1 $$ -- /*`;
    const [done, failedJob, startedJob, again] = await held(4);
    const write = writeReleases(database, 'steady-worker', false, () => null);
    await write({
      ...empty(),
      completed: [{ id: done.id, claim: done.claim, result: JSON.stringify({ text }) }],
      failed: [{ id: failedJob.id, claim: failedJob.claim, error: text, code: `E'${text}`, delayMs: 60_000, payload: JSON.stringify([text]) }],
      started: [startedJob.id],
      progress: new Map([[startedJob.id, JSON.stringify(text)]]),
      claims: new Map([[startedJob.id, startedJob.claim]]),
    });
    // completions not kept: the completed job is gone, not in finished_jobs
    const gone = await sql.query(`select 1 from job_queue.jobs where id = $1 union all select 1 from job_queue.finished_jobs where id = $1`, [done.id]);
    assert.equal(gone.rowCount, 0);
    const failed = (await sql.query(`select last_error, errors -> -1 ->> 'code' as code, payload, locked_by from job_queue.jobs where id = $1`, [failedJob.id])).rows[0];
    assert.deepEqual(failed, { last_error: text, code: `E'${text}`, payload: [text], locked_by: null });
    const started = (await sql.query(`select progress, started_at is not null as started from job_queue.jobs where id = $1`, [startedJob.id])).rows[0];
    assert.deepEqual(started, { progress: text, started: true });
    // a flush written again names each job's claim ($11): it completes the job still held under it
    const kept = writeReleases(database, 'steady-worker', true, () => null);
    await kept({ ...empty(), completed: [{ id: again.id, claim: again.claim, result: JSON.stringify(text) }], claims: new Map([[again.id, again.claim]]), again: true });
    const { rows } = await sql.query(`select state, result from job_queue.finished_jobs where id = $1`, [again.id]);
    assert.deepEqual(rows, [{ state: 'completed', result: text }]);
  });

  it('a flush that fails leaves no connection in a transaction, and the next one is written', async () => {
    const [bad, good] = await held(2);
    const write = writeReleases(database, 'steady-worker', true, () => null);
    // results are JSON text the worker made (toJsonText): not JSON here, the server refuses the whole flush
    await assert.rejects(write({ ...empty(), completed: [{ id: bad.id, claim: bad.claim, result: '{not json' }] }), /invalid input syntax for type json/);
    const { rows: stuck } = await sql.query(`select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`);
    assert.equal(stuck[0].n, 0);
    assert.equal((await sql.query(`select locked_by from job_queue.jobs where id = $1`, [bad.id])).rows[0].locked_by, 'steady-worker', 'nothing of the failed flush written');
    await write({ ...empty(), completed: [bad, good].map(({ id, claim }) => ({ id, claim, result: '{"ok":true}' })) });
    const { rows } = await sql.query(`select count(*)::int as n from job_queue.finished_jobs where id = any($1::bigint[]) and state = 'completed'`, [[bad.id, good.id]]);
    assert.equal(rows[0].n, 2);
  });
});
