// Run after `npm run build`, with each build to compare built in a folder of its own
// (`git archive <commit> | tar -x -C <dir>`, node_modules linked to this repository's, `npx tsc -p tsconfig.json`):
//   SERVER_URL=postgres://postgres@127.0.0.1:5432/postgres BUILDS=before=/tmp/ab-9ca3c3e,after=/tmp/ab-main \
//     [SETUP_<label>="<sql>"] [PAIRS=6] [JOBS=20000] node apps/bench/probes/drain-ab.cjs
// The bench's drain line (suite.ts: JOBS jobs added by addMany() in calls of 1,000, then timed from
// worker.start() to the last handler start, the worker left running until the jobs table is empty)
// for two or more builds in one process, each build's own `openApp` (apps/bench/system-nestjs-job-queue)
// on a fresh database (DB, recreated before every drain, so that each build runs on its own
// migrations). One uncounted drain per build first (JIT, the pg driver), then PAIRS cycles, the
// builds' order rotated cycle by cycle (ab, ba, …). Per drain: jobs/s, and the CPU of this
// process and of the database's backends (from /proc: same machine only) per job. SETUP_<label>:
// a statement run on that build's database after its app opened (say, to drop a trigger), so that
// one build can be measured twice, with and without something. Prints each drain, then per build
// the medians and, against the first build, the median of the cycle-by-cycle ratios.
const fs = require('fs');
const { join } = require('path');
const { Client } = require('pg');

const serverUrl = process.env.SERVER_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const DB = process.env.DB || 'bench_drain_ab';
const PAIRS = +(process.env.PAIRS || 6);
const BUILDS = (process.env.BUILDS || `this=${join(__dirname, '../../..')}`).split(',').map((spec) => {
  const [label, dir] = spec.split('=');
  const dist = join(dir, 'dist/apps/bench');
  return { label, dir, openApp: require(join(dist, 'system-nestjs-job-queue')).openApp, setup: process.env[`SETUP_${label}`] };
});
// The harness (config, database, adds) of the first build: the bench's files are the same in both.
const harness = join(BUILDS[0].dir, 'dist/apps/bench');
const { readBenchConfig } = require(join(harness, 'config'));
const { recreateDatabase, dropDatabase } = require(join(harness, 'database'));
const { addInChunks, waitUntilNoJobs } = require(join(harness, 'suite'));
const config = readBenchConfig([], process.env);
const TICK_MS = 10; // USER_HZ 100

const cpuMs = (pid) => {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) * TICK_MS;
  } catch {
    return 0;
  }
};
async function backendCpu(admin) {
  const pids = (await admin.query('select pid from pg_stat_activity where datname = $1', [DB])).rows.map((r) => r.pid);
  return new Map(pids.map((pid) => [pid, cpuMs(pid)]));
}

async function drain(build, admin) {
  const queue = await build.openApp(await recreateDatabase(serverUrl, DB), config);
  try {
    if (build.setup) await queue.dataSource.query(build.setup);
    await addInChunks(queue, config.jobs, config.chunkSize);
    const before = await backendCpu(admin);
    const node0 = process.cpuUsage();
    queue.probe.reset();
    const started = performance.now();
    const worker = await queue.startWorker('default');
    try {
      await queue.probe.untilCount(config.jobs, 120_000);
      const perSecond = (config.jobs * 1000) / (performance.now() - started);
      await waitUntilNoJobs(queue);
      const node = process.cpuUsage(node0);
      const after = await backendCpu(admin);
      let pg = 0;
      for (const [pid, ms] of after) pg += ms - (before.get(pid) ?? 0);
      const perJob = (ms) => (ms * 1000) / config.jobs; // µs
      return { perSecond, nodeUs: perJob((node.user + node.system) / 1000), pgUs: perJob(pg) };
    } finally {
      await worker.stop();
    }
  } finally {
    await queue.close();
  }
}

const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const range = (a, f) => `${f(Math.min(...a))}–${f(Math.max(...a))}`;
const int = (x) => Math.round(x).toLocaleString('en-US');

(async () => {
  const admin = new Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    console.log(`JOBS=${config.jobs} CONCURRENCY=${config.concurrency} PAIRS=${PAIRS} builds: ${BUILDS.map((b) => `${b.label} (${b.dir})${b.setup ? ` + ${b.setup}` : ''}`).join(', ')}`);
    for (const build of BUILDS) await drain(build, admin); // warm-up, not counted
    const results = new Map(BUILDS.map((b) => [b.label, []]));
    for (let i = 0; i < PAIRS; i++) {
      for (let j = 0; j < BUILDS.length; j++) {
        const build = BUILDS[(i + j) % BUILDS.length];
        const r = await drain(build, admin);
        results.get(build.label).push(r);
        console.log(`cycle ${String(i + 1).padStart(2)} ${build.label.padEnd(10)} ${int(r.perSecond).padStart(7)} jobs/s  node ${r.nodeUs.toFixed(1)} µs/job  postgres ${r.pgUs.toFixed(1)} µs/job`);
      }
    }
    const first = results.get(BUILDS[0].label);
    for (const { label } of BUILDS) {
      const rs = results.get(label);
      const rates = rs.map((r) => r.perSecond);
      const ratios = rs.map((r, i) => r.perSecond / first[i].perSecond);
      console.log(
        `${label.padEnd(10)} median ${int(median(rates))} jobs/s (${range(rates, int)}), node ${median(rs.map((r) => r.nodeUs)).toFixed(1)} µs/job, ` +
          `postgres ${median(rs.map((r) => r.pgUs)).toFixed(1)} µs/job; against ${BUILDS[0].label}: medians ${((100 * median(rates)) / median(first.map((r) => r.perSecond))).toFixed(1)} %, ` +
          `cycle by cycle ${(100 * median(ratios)).toFixed(1)} % (${range(ratios, (x) => (100 * x).toFixed(0))})`,
      );
    }
  } finally {
    await admin.end();
    await dropDatabase(serverUrl, DB).catch(() => undefined);
  }
  process.exit(0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
