// Run after `npm run build`: DATABASE_URL=postgres://… node apps/bench/probes/latency.cjs (N=300 samples by default).
// Where an add → handler start goes, one job at a time with an idle worker: the add's round trip, the NOTIFY's arrival, the claim, the handler's start. LOCAL_START=0 turns localStart off.
const { readBenchConfig } = require('../../../dist/apps/bench/config');
const { recreateDatabase, dropDatabase } = require('../../../dist/apps/bench/database');
const { openApp } = require('../../../dist/apps/bench/system-nestjs-job-queue');
const { JobQueueDatabase } = require('../../../dist/libs/job-queue/src/db/job-queue-database');
const { NotifyListener } = require('../../../dist/libs/job-queue/src/db/notify-listener');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  const config = readBenchConfig([], process.env);
  const url = await recreateDatabase(process.env.DATABASE_URL, 'bench_latency_probe');
  let current;
  const proto = JobQueueDatabase.prototype;
  const runOn = proto.runOn;
  proto.runOn = async function (c, st, v) {
    const t = performance.now();
    try { return await runOn.call(this, c, st, v); } finally { if (st === 'claimJobs' && current && !current.claim) current.claim = [t, performance.now()]; }
  };
  const connect = NotifyListener.prototype.connect;
  NotifyListener.prototype.connect = async function () {
    const on = this.onNotify;
    this.onNotify = (ch, p) => { if (current && !current.notify && ch) current.notify = performance.now(); on(ch, p); };
    return connect.call(this);
  };
  // LOCAL_START=0: every job through NOTIFY and a claim, as a worker in another process takes it
  if (process.env.LOCAL_START === '0') require('../../../dist/libs/job-queue/src/service/local-start').LocalStart.prototype.offer = () => undefined;
  const app = await openApp(url, config);
  const w = await app.startWorker('default');
  await sleep(500);
  const N = +(process.env.N || 300);
  const samples = [];
  for (let i = 0; i < N; i++) {
    await sleep(2 + Math.floor(Math.random() * 9));
    const start = app.probe.nextStart(10_000);
    current = { t0: performance.now() };
    await app.addOne(i);
    current.added = performance.now();
    current.started = await start;
    samples.push(current); current = undefined;
  }
  const med = (f) => { const v = samples.map(f).filter((x) => Number.isFinite(x)).sort((a, b) => a - b); return v.length ? `${v[Math.floor(v.length / 2)].toFixed(3)} (of ${v.length})` : '-'; };
  console.log(`samples ${samples.length}`);
  console.log(`add() round trip          p50 ${med((s) => s.added - s.t0)} ms`);
  console.log(`add start → NOTIFY heard  p50 ${med((s) => s.notify - s.t0)} ms`);
  console.log(`NOTIFY → claim sent       p50 ${med((s) => s.claim && s.claim[0] - s.notify)} ms`);
  console.log(`claim round trip          p50 ${med((s) => s.claim && s.claim[1] - s.claim[0])} ms`);
  console.log(`claim back → handler      p50 ${med((s) => s.claim && s.started - s.claim[1])} ms`);
  console.log(`add() back → handler      p50 ${med((s) => s.started - s.added)} ms`);
  console.log(`add start → handler       p50 ${med((s) => s.started - s.t0)} ms`);
  await w.stop(); await app.close(); await dropDatabase(process.env.DATABASE_URL, 'bench_latency_probe');
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
