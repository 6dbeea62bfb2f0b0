// Run after `npm run build`, each build to compare built in a folder of its own (as for add-ab.cjs):
//   SERVER_URL=postgres://… BUILDS=before=/tmp/ab-before,after=/tmp/ab-main [N=600] [LOCAL_START=0] node apps/bench/probes/latency-ab.cjs
// add() → handler start, one job at a time (2–10 ms apart), for two or more builds in one process, each
// build's own `openApp` and worker on a database of its own, the builds taking turns sample by sample
// so that the disk's and the machine's drift falls on all. LOCAL_START=0: every job through NOTIFY and a
// claim, as a job added in another process (the bench's "localStart off" line). Prints p50 and p90 per
// build and the p50 against the first build's.
const { join } = require('path');
const { randomInt } = require('crypto');
const serverUrl = process.env.SERVER_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const N = +(process.env.N || 600);
const harness = join(__dirname, '../../../dist/apps/bench');
const { readBenchConfig } = require(join(harness, 'config'));
const { recreateDatabase, dropDatabase } = require(join(harness, 'database'));
const config = readBenchConfig([], process.env);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const BUILDS = (process.env.BUILDS || `this=${join(__dirname, '../../..')}`).split(',').map((spec) => {
  const [label, dir] = spec.split('=');
  if (process.env.LOCAL_START === '0') require(join(dir, 'dist/libs/job-queue/src/service/local-start')).LocalStart.prototype.offer = () => undefined;
  return { label, openApp: require(join(dir, 'dist/apps/bench/system-nestjs-job-queue')).openApp, samples: [] };
});
(async () => {
  for (const [i, build] of BUILDS.entries()) {
    build.database = `bench_latency_ab_${i}`;
    build.app = await build.openApp(await recreateDatabase(serverUrl, build.database), config);
    build.worker = await build.app.startWorker('default');
  }
  await sleep(500);
  for (let i = 0; i < N + 20; i++) {
    for (const build of [...BUILDS.slice(i % BUILDS.length), ...BUILDS.slice(0, i % BUILDS.length)]) {
      await sleep(randomInt(2, 11));
      const start = build.app.probe.nextStart(10_000);
      const t0 = performance.now();
      await build.app.addOne(i);
      const ms = (await start) - t0;
      if (i >= 20) build.samples.push(ms); // the first 20 warm up
    }
  }
  const pct = (a, p) => a[Math.min(a.length - 1, Math.floor((a.length * p) / 100))];
  const base = pct([...BUILDS[0].samples].sort((a, b) => a - b), 50);
  for (const build of BUILDS) {
    const s = [...build.samples].sort((a, b) => a - b);
    console.log(`${build.label.padEnd(10)} p50 ${pct(s, 50).toFixed(3)} ms  p90 ${pct(s, 90).toFixed(3)} ms  p99 ${pct(s, 99).toFixed(3)} ms  (p50 ${((pct(s, 50) / base) * 100).toFixed(1)} % of ${BUILDS[0].label})`);
  }
  for (const build of BUILDS) {
    await build.worker.stop();
    await build.app.close();
    await dropDatabase(serverUrl, build.database);
  }
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
