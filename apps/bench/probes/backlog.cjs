// Run after `npm run build`: DATABASE_URL=postgres://…/probe N=400000 [VAC=1500] node apps/bench/probes/backlog.cjs (drops and recreates the job_queue schema of that database).
// SQL-level probe of the backlog slowdown: claim+release loops over N jobs, timing per slice.
const { Client } = require('pg');
const { createQueries } = require('../../../dist/libs/job-queue/src/sql/queries');
const { CLAIM_SESSION_SETTINGS } = require('../../../dist/libs/job-queue/src/worker/claim-connection');
const { SCHEMA: S, TASK, insertJobs, settleJobsTable } = require('../../../dist/apps/bench/jobs-table');
const { createSchema } = require('../../../dist/apps/bench/sql-limit');
const sql = createQueries(S);
const { releaseParameters } = require(require('path').join(__dirname, '../../../dist/libs/job-queue/src/worker/release-parameters'));
const release = (ids) => releaseParameters('w', { completed: ids.map((id) => ({ id, result: null })), failed: [], started: [], progress: new Map() }, true);
const url = process.env.DATABASE_URL;
const N = +(process.env.N || 1000000), BATCH = +(process.env.BATCH || 250), VAC = +(process.env.VAC || 0);
(async () => {
  const admin = new Client({ connectionString: url }); await admin.connect();
  await admin.query(`drop schema if exists ${S} cascade`);
  await createSchema(url);
  await insertJobs(admin, N);
  await settleJobsTable(admin, { analyze: true });
  const claimC = new Client({ connectionString: url }); await claimC.connect(); await claimC.query(CLAIM_SESSION_SETTINGS);
  const relC = new Client({ connectionString: url }); await relC.connect();
  await relC.query({ text: sql.registerWorker, values: ['w', 20000, null, null, null] });
  let stop = false, vacuums = 0;
  const vacLoop = (async () => { if (!VAC) return; const v = new Client({ connectionString: url }); await v.connect();
    while (!stop) { const t = performance.now(); await v.query(`vacuum ${process.env.VACOPT||''} ${S}.jobs`); vacuums++; console.log(`  vacuum ${(performance.now()-t).toFixed(0)} ms`); await new Promise(r => setTimeout(r, VAC)); } await v.end(); })();
  let done = 0, claimMs = 0, relMs = 0, slice = 0; const t0 = performance.now(); let ts = t0;
  for (;;) {
    let t = performance.now();
    const c = await claimC.query({ name: 'claim', text: sql.claimJobs, values: [[TASK], [], BATCH, 'w', BATCH, []] });
    claimMs += performance.now() - t;
    if (!c.rows.length) break;
    const ids = c.rows.map(r => r.id);
    t = performance.now();
    await relC.query({ name: 'release', text: sql.releaseJobs, values: release(ids) });
    relMs += performance.now() - t;
    done += ids.length;
    if (Math.floor(done / 100000) > slice) { slice = Math.floor(done / 100000); const now = performance.now();
      const ex = await admin.query(`select n_dead_tup, n_live_tup from pg_stat_user_tables where relname='jobs' and schemaname=$1`, [S]);
      console.log(`${done}: ${(100000*1000/(now-ts)).toFixed(0)} jobs/s, claim ${(claimMs/(100000/BATCH)).toFixed(2)} ms, release ${(relMs/(100000/BATCH)).toFixed(2)} ms, dead ${ex.rows[0].n_dead_tup}`);
      claimMs = relMs = 0; ts = now; }
  }
  stop = true; await vacLoop;
  console.log(`total ${(done*1000/(performance.now()-t0)).toFixed(0)} jobs/s, ${vacuums} vacuums`);
  await Promise.all([admin, claimC, relC].map(c => c.end()));
})().catch(e => { console.error(e); process.exit(1); });
