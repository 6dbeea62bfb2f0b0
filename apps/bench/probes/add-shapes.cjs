// Run after `npm run build`: SERVER_URL=postgres://… [ROUNDS=8] node apps/bench/probes/add-shapes.cjs
// One client adding jobs one at a time, each add its own commit, in turns of 200, in the shapes an
// add's message can take (docs/benchmark.md, "Sustained load": the notification lock):
//   in_one_transaction     addJobKeyless, NOTIFY in its transaction (an add in a caller's transaction, or as before)
//   notify_unflushed_after the add as landed: its insert, commit, then the NOTIFY in a transaction not waiting for its flush
//   notify_flushed_after   the same, the NOTIFY's transaction committed synchronously
//   no_notify, no_notify_simple  the insert alone, extended and simple protocol (no worker woken: a floor)
// Prints the mean µs per add of each shape over ROUNDS rounds, the shapes' order reversed every round.
const { Client } = require('pg');
const { readBenchConfig } = require('../../../dist/apps/bench/config');
const { recreateDatabase, dropDatabase } = require('../../../dist/apps/bench/database');
const { openApp } = require('../../../dist/apps/bench/system-nestjs-job-queue');
const { createQueries } = require('../../../dist/libs/job-queue/src/sql/queries');
(async () => {
  const server = process.env.SERVER_URL;
  const url = await recreateDatabase(server, 'addshape');
  const app = await openApp(url, readBenchConfig([], process.env)); await app.close();
  const q = createQueries('job_queue');
  const c = new Client({ connectionString: url }); await c.connect();
  const lit = (v) => v === null ? 'null' : typeof v === 'number' ? String(v) : `'${String(v).replace(/'/g, "''")}'`;
  const vals = (i) => ['bench_noop', JSON.stringify({ index: i }), null, null, null, null, null, null, null, null, null];
  const types = 'text, jsonb, text, timestamptz, integer, integer, text[], uuid, bigint, smallint, text';
  await c.query(`prepare pq (${types}) as ${q.addJobKeylessQuiet}`);
  const exec = (i) => `execute pq(${vals(i).map(lit).join(', ')})`;
  const notify = "select pg_notify('job_queue:jobs', '')";
  const V = {
    in_one_transaction: (i) => c.query({ name: 'a0', text: q.addJobKeyless, values: vals(i) }),
    notify_unflushed_after: (i) => c.query(`begin; set local plan_cache_mode = force_generic_plan; ${exec(i)}; commit; begin; set local synchronous_commit = off; ${notify}; commit`),
    notify_flushed_after: (i) => c.query(`begin; set local plan_cache_mode = force_generic_plan; ${exec(i)}; commit; ${notify}`),
    no_notify: (i) => c.query({ name: 'a1', text: q.addJobKeylessQuiet, values: vals(i) }),
    no_notify_simple: (i) => c.query(exec(i)),
  };
  const names = Object.keys(V); const tot = Object.fromEntries(names.map((n) => [n, 0]));
  const N = 200, ROUNDS = +(process.env.ROUNDS || 8); let i = 0;
  for (let r = 0; r <= ROUNDS; r++) for (const n of (r % 2 ? names : [...names].reverse())) {
    const t = performance.now(); for (let k = 0; k < N; k++) await V[n](i++); const d = performance.now() - t; if (r) tot[n] += d;
  }
  for (const n of names) console.log(n.padEnd(24), (1000 * tot[n] / (N * ROUNDS)).toFixed(0), 'µs/add');
  await c.end(); await dropDatabase(server, 'addshape');
})().catch((e) => { console.error(e); process.exit(1); });
