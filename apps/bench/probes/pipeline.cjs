// Run after `npm run build`: DATABASE_URL=postgres://… node apps/bench/probes/pipeline.cjs (N=100000 by default).
// Where a drain's time goes, in one process: busy time of claims and releases, their overlap, and the CPU of Node, of PostgreSQL (all its processes, via /proc) and of the claim backend.
const { readBenchConfig } = require('../../../dist/apps/bench/config');
const { recreateDatabase, dropDatabase } = require('../../../dist/apps/bench/database');
const { openApp } = require('../../../dist/apps/bench/system-nestjs-job-queue');
const { insertJobs, settleJobsTable } = require('../../../dist/apps/bench/jobs-table');
const { JobQueueDatabase } = require('../../../dist/libs/job-queue/src/db/job-queue-database');
const fs = require('fs');
const HZ = 100; // clock ticks per second of /proc/<pid>/stat
function statCpu(stat) { const f = stat.slice(stat.lastIndexOf(')') + 2).split(' '); return (+f[11] + +f[12]) * 1000 / HZ; } // utime+stime, ms
function pidCpu(pid) { return statCpu(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')); }
function pgCpu() { // ms of CPU used by all postgres processes so far (live ones)
  let total = 0;
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try { const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8'); if (stat.includes('(postgres)')) total += statCpu(stat); } catch {}
  }
  return total;
}
(async () => {
  const config = readBenchConfig([], process.env);
  const url = await recreateDatabase(process.env.DATABASE_URL, 'bench_pipe_probe');
  const app = await openApp(url, config);
  const N = +(process.env.N || 100000);
  // openApp does not expose the app: every JobQueueDatabase instance is timed through its prototype
  const events = [];
  const proto = JobQueueDatabase.prototype;
  const runOn = proto.runOn;
  proto.runOn = async function (c, st, v) { const t = performance.now(); try { return await runOn.call(this, c, st, v); } finally { if (st === 'claimJobs') events.push(['claim', t, performance.now(), v[2]]); else if (st === 'releaseJobs') events.push(['release', t, performance.now(), v[1].length]); } };
  await insertJobs(app.dataSource, N); await settleJobsTable(app.dataSource, { analyze: true });
  const t0 = performance.now(); setTimeout(async () => { const r = await app.dataSource.query(`select pid, application_name from pg_stat_activity where datname = current_database() and application_name = 'nestjs-job-queue claims ' || $1`, [process.pid]); global.claimPid = r[0] && r[0].pid; global.claimCpu0 = pidCpu(global.claimPid); }, 300); const cpu0 = process.cpuUsage(); const pgcpu0 = pgCpu();
  const w = await app.startWorker('default');
  while ((await app.countJobs()) > 0) await new Promise((r) => setTimeout(r, 20));
  const t1 = performance.now(); const claimCpu = pidCpu(global.claimPid) - global.claimCpu0; const cpu = process.cpuUsage(cpu0); const pgcpu = pgCpu() - pgcpu0;
  await w.stop();
  const sum = (k) => events.filter((e) => e[0] === k && e[1] >= t0).reduce((a, e) => a + e[2] - e[1], 0);
  const cnt = (k) => events.filter((e) => e[0] === k && e[1] >= t0).length;
  const rows = (k) => events.filter((e) => e[0] === k && e[1] >= t0).reduce((a, e) => a + e[3], 0);
  // overlap: time both busy
  const iv = (k) => events.filter((e) => e[0] === k && e[1] >= t0).map((e) => [e[1], e[2]]);
  let both = 0; const cl = iv('claim'), rl = iv('release');
  for (const [a, b] of cl) for (const [c, d] of rl) { const o = Math.min(b, d) - Math.max(a, c); if (o > 0) both += o; }
  const wall = t1 - t0;
  console.log(`drain ${N} in ${wall.toFixed(0)} ms = ${(N * 1000 / wall).toFixed(0)} jobs/s`);
  console.log(`claims ${cnt('claim')} (${(rows('claim')/cnt('claim')).toFixed(0)} asked avg), busy ${sum('claim').toFixed(0)} ms (${(100*sum('claim')/wall).toFixed(0)} %), avg ${(sum('claim')/cnt('claim')).toFixed(2)} ms`);
  console.log(`releases ${cnt('release')} (${(rows('release')/cnt('release')).toFixed(0)} ids avg), busy ${sum('release').toFixed(0)} ms (${(100*sum('release')/wall).toFixed(0)} %), avg ${(sum('release')/cnt('release')).toFixed(2)} ms`);
  console.log(`node cpu ${((cpu.user+cpu.system)/1000).toFixed(0)} ms (${(100*(cpu.user+cpu.system)/1000/wall).toFixed(0)} % of a core), postgres cpu ${pgcpu.toFixed(0)} ms (${(100*pgcpu/wall).toFixed(0)} % of a core)`);
  console.log(`claim backend cpu after the first 300 ms: ${claimCpu.toFixed(0)} ms over ${(wall-300).toFixed(0)} ms wall (${(100*claimCpu/(wall-300)).toFixed(0)} %)`);
  console.log(`both busy ${both.toFixed(0)} ms (${(100*both/wall).toFixed(0)} %)`);
  await app.close(); await dropDatabase(process.env.DATABASE_URL, 'bench_pipe_probe');
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
