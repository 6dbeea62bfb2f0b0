// Run after `npm run build`, the builds to compare built as for drain-ab.cjs:
//   SERVER_URL=postgres://… BUILDS=before=/tmp/ab/a,after=/work/main [CYCLES=300] [BATCH=2] node apps/bench/probes/small-flush-ab.cjs
// A worker's small flushes, as under a steady load: each build's own app (its migrations, on a
// database of its own) writes flushes of BATCH completions through its own writeReleases (the
// worker's path, plan choice included), the builds taking turns flush by flush. Prints each
// build's median and p90 per flush (round trips included) and the server's time per flush from
// pg_stat_statements when the server has it loaded (exec + plan of releaseJobs).
const { join } = require('path');
const { Client } = require('pg');
const serverUrl = process.env.SERVER_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const CYCLES = +(process.env.CYCLES || 300);
const BATCH = +(process.env.BATCH || 2);
const median = (xs, q = 0.5) => [...xs].sort((a, b) => a - b)[Math.floor(q * xs.length)];
(async () => {
  const builds = [];
  for (const spec of (process.env.BUILDS || '').split(',')) {
    const [label, dir] = spec.split('=');
    const bench = join(dir, 'dist/apps/bench');
    const { recreateDatabase } = require(join(bench, 'database'));
    const { openApp } = require(join(bench, 'system-nestjs-job-queue'));
    const { readBenchConfig } = require(join(bench, 'config'));
    const { JobQueueDatabase } = require(join(dir, 'dist/libs/job-queue/src/db/job-queue-database'));
    const { writeReleases } = require(join(dir, 'dist/libs/job-queue/src/worker/release-parameters'));
    const { claimTokenOf } = require(join(dir, 'dist/libs/job-queue/src/sql/release'));
    const url = await recreateDatabase(serverUrl, `small_flush_${label}`);
    const app = await openApp(url, readBenchConfig([], {}));
    const sql = new Client(url); await sql.connect();
    await sql.query(`insert into job_queue.workers (id) values ('ab-worker')`);
    builds.push({ label, app, sql, claimTokenOf, write: null, JobQueueDatabase, writeReleases, times: [] });
  }
  for (const b of builds) {
    // reach the app's JobQueueDatabase through Nest: JobQueueService keeps it
    const db = findDatabase(b.app.jobs, b.JobQueueDatabase);
    b.write = b.writeReleases(db, 'ab-worker', true, () => null);
  }
  const empty = { failed: [], started: [], progress: new Map(), claims: new Map() };
  for (let cycle = 0; cycle < CYCLES + 10; cycle++) {
    const order = cycle % 2 ? [...builds].reverse() : builds;
    for (const b of order) {
      const { rows } = await b.sql.query(`insert into job_queue.jobs (task_identifier, locked_at, locked_by, started_at, attempts)
        select 'bench_noop', now(), 'ab-worker', now(), 1 from generate_series(1, $1) returning id, ${b.claimTokenOf('jobs')} as claim`, [BATCH]);
      const started = performance.now();
      await b.write({ ...empty, completed: rows.map(({ id, claim }) => ({ id, claim, result: '{"ok":true}' })) });
      if (cycle >= 10) b.times.push(performance.now() - started);
    }
  }
  for (const b of builds) console.log(`${b.label}: flush of ${BATCH}: median ${median(b.times).toFixed(3)} ms, p90 ${median(b.times, 0.9).toFixed(3)} ms (${(100 * median(b.times) / median(builds[0].times)).toFixed(1)} % of ${builds[0].label}'s median)`);
  for (const b of builds) {
    const r = await b.sql.query(`select sum(calls)::int as calls, sum(total_exec_time + total_plan_time) / sum(calls) as ms, sum(plans)::int as plans from pg_stat_statements
      where dbid = (select oid from pg_database where datname = current_database()) and query like '%with mine as materialized%'`).catch(() => ({ rows: [] }));
    if (r.rows[0]?.calls) console.log(`${b.label}: server time per releaseJobs ${r.rows[0].ms.toFixed(3)} ms (${r.rows[0].calls} calls, ${r.rows[0].plans} planned)`);
    await b.sql.end(); await b.app.close();
  }
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });

function findDatabase(service, Type) {
  for (const value of Object.values(service)) if (value instanceof Type) return value;
  for (const value of Object.values(service)) if (value && typeof value === 'object') for (const inner of Object.values(value)) if (inner instanceof Type) return inner;
  throw new Error('no JobQueueDatabase found in the service');
}
