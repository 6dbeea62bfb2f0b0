// Run after `npm run build`: SERVER_URL=postgres://… [OTHERS=50000] [VARIANT=landed|plain] node apps/bench/probes/claim-by-id-walk.cjs
// claimJobsById's generic plan made on a small table, then used beside OTHERS due jobs of a task that sorts
// before the claimed one's (autovacuum off for the table, so no ANALYZE makes a new plan meanwhile): the
// median time of 50 claims of one job each, before and after they were added, and the plan's scans.
// VARIANT=plain reads is_available as a plain condition, as before 2026-11-29 (see sql/claim.ts).
const dist = '../../../dist';
const server = process.env.SERVER_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const { Client } = require('pg');
const { createQueries } = require(dist + '/libs/job-queue/src/sql/queries');
const { CLAIM_SESSION_SETTINGS } = require(dist + '/libs/job-queue/src/worker/claim-connection');
const { recreateDatabase, dropDatabase } = require(dist + '/apps/bench/database');
const { createSchema } = require(dist + '/apps/bench/sql-limit');
const { SCHEMA: S, TASK } = require(dist + '/apps/bench/jobs-table');
const sql = createQueries(S);
const variant = process.env.VARIANT || 'landed';
const plain = sql.claimJobsById.replace('coalesce(j.is_available, false)', 'j.is_available');
if (plain === sql.claimJobsById) throw new Error('claimJobsById has changed: its coalesce(j.is_available, false) is not there');
const text = variant === 'landed' ? sql.claimJobsById : plain;
(async () => {
  const url = await recreateDatabase(server, 'bench_claim_by_id_walk');
  await createSchema(url);
  const c = new Client({ connectionString: url }); await c.connect();
  const claimer = new Client({ connectionString: url }); await claimer.connect();
  await claimer.query(CLAIM_SESSION_SETTINGS);
  await c.query(`alter table ${S}.jobs set (autovacuum_enabled = false)`);
  await claimer.query({ text: sql.registerWorker, values: ['w', 20000, null, null, null] });
  const add = async () => (await c.query(`insert into ${S}.jobs (task_identifier, payload) values ($1, '{}') returning id`, [TASK])).rows[0].id;
  const claim = async (id) => { const t = performance.now(); const r = await claimer.query({ name: 'byid', text, values: [[TASK], [], 1, 'w', 1, [id]] }); if (r.rows.length !== 1) throw new Error('not claimed'); return performance.now() - t; };
  for (let i = 0; i < 10; i++) await claim(await add()); // the generic plan, made on a table of a few rows
  const before = []; for (let i = 0; i < 50; i++) before.push(await claim(await add()));
  await c.query(`insert into ${S}.jobs (task_identifier, payload) select 'aaa_other', '{}' from generate_series(1, ${process.env.OTHERS || 50000})`);
  const after = []; for (let i = 0; i < 50; i++) after.push(await claim(await add()));
  const med = (a) => a.sort((x, y) => x - y)[a.length >> 1].toFixed(3);
  const plan = await claimer.query({ text: `explain execute byid('{${TASK}}', '{}', 1, 'w', 1, '{1}')` }).catch((e) => ({ rows: [{ 'QUERY PLAN': e.message }] }));
  console.log(variant, 'claim by id, median ms: small table', med(before), '| beside', process.env.OTHERS || 50000, 'jobs of another task', med(after));
  console.log(plan.rows.map((r) => r['QUERY PLAN']).filter((l) => /Scan/.test(l)).join('\n'));
  await Promise.all([c.end(), claimer.end()]);
  await dropDatabase(server, 'bench_claim_by_id_walk');
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
