// Run after `npm run build`: DATABASE_URL=postgres://… node apps/bench/probes/add-flow.cjs (TURNS=15).
// The bench's addFlow-against-addMany line alone, alternating, medians; with FUNCTION=file.sql, that SQL (add_flow replaced) is run on the fresh database first.
const { readBenchConfig } = require('../../../dist/apps/bench/config');
const { recreateDatabase, dropDatabase } = require('../../../dist/apps/bench/database');
const { openApp } = require('../../../dist/apps/bench/system-nestjs-job-queue');
const { TASK } = require('../../../dist/apps/bench/jobs-table');
const fs = require('fs');
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
(async () => {
  const config = readBenchConfig([], process.env);
  const url = await recreateDatabase(process.env.DATABASE_URL, 'bench_add_flow_probe');
  const app = await openApp(url, config);
  if (process.env.FUNCTION) await app.dataSource.query(fs.readFileSync(process.env.FUNCTION, 'utf8'));
  const STEPS = 1000;
  const { JobQueueDatabase } = require('../../../dist/libs/job-queue/src/db/job-queue-database');
  const dbTimes = { addFlow: [], addJobs: [] }; const run = JobQueueDatabase.prototype.run;
  JobQueueDatabase.prototype.run = async function (st, v, m) { const t = performance.now(); try { return await run.call(this, st, v, m); } finally { (dbTimes[st] ||= []).push(performance.now() - t); } };
  const graph = (turn) => { let seed = 7 + turn; const next = (n) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    return Array.from({ length: STEPS }, (_, i) => ({ ref: `s${i}`, identifier: TASK, payload: { index: i }, dependsOn: i < 10 ? [] : [...new Set(Array.from({ length: 1 + next(3) }, () => `s${next(i)}`))] })); };
  const flow = [], many = [];
  const turns = +(process.env.TURNS || 15);
  for (let turn = 0; turn <= turns; turn++) {
    const steps = graph(turn);
    const time = async (f) => { const t = performance.now(); await f(); return performance.now() - t; };
    const a = () => time(() => app.jobs.addFlow(steps));
    const b = () => time(() => app.addMany(turn * STEPS, STEPS));
    let fa, fb;
    if (turn % 2) { fb = await b(); fa = await a(); } else { fa = await a(); fb = await b(); }
    if (turn) { flow.push(fa); many.push(fb); }
  }
  console.log(Object.entries(dbTimes).filter(([, v]) => v.length > 1).map(([k, v]) => `${k} ${median(v.slice(1)).toFixed(2)} ms in db.run`).join(', '));
  console.log(`addFlow ${median(flow).toFixed(2)} ms, addMany ${median(many).toFixed(2)} ms: addFlow at ${(100 * median(many) / median(flow)).toFixed(1)} % of addMany's rate`);
  await app.close(); await dropDatabase(process.env.DATABASE_URL, 'bench_add_flow_probe');
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
