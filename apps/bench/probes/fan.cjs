// Run after `npm run build`: DATABASE_URL=postgres://… node apps/bench/probes/fan.cjs (TURNS=5).
// Where a fan-out/fan-in flow's time goes: the bench's flow line, with each query's start and end (by its first words) on a timeline, and the handler's runs.
const { readBenchConfig } = require('../../../dist/apps/bench/config');
const { recreateDatabase, dropDatabase } = require('../../../dist/apps/bench/database');
const { openApp } = require('../../../dist/apps/bench/system-nestjs-job-queue');
const { SCHEMA, TASK } = require('../../../dist/apps/bench/jobs-table');
const pg = require('pg');
(async () => {
  const config = readBenchConfig([], process.env);
  const url = await recreateDatabase(process.env.DATABASE_URL, 'bench_fan_probe');
  const app = await openApp(url, config);
  const events = [];
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (q, ...rest) {
    const text = typeof q === 'string' ? q : q && (q.text || q.name) || '?';
    const t = performance.now();
    const done = () => events.push([label(text), t, performance.now()]);
    const last = rest[rest.length - 1];
    if (typeof last === 'function') rest[rest.length - 1] = (...a) => { done(); return last(...a); };
    else if (q && typeof q.callback === 'function') { const cb = q.callback; q.callback = (...a) => { done(); return cb(...a); }; }
    const r = query.call(this, q, ...rest);
    if (r && r.then) r.then(done, () => {});
    return r;
  };
  const label = (text) => text.replace(/\s+/g, ' ').trim().slice(0, 60);
  const hit = app.probe.hit.bind(app.probe);
  app.probe.hit = () => { events.push(['handler', performance.now(), performance.now()]); hit(); };
  const FAN = 1000;
  const fan = [{ ref: 'root', identifier: TASK }, ...Array.from({ length: FAN }, (_, i) => ({ ref: `m${i}`, identifier: TASK, payload: { index: i }, dependsOn: ['root'] })),
    { ref: 'join', identifier: TASK, dependsOn: Array.from({ length: FAN }, (_, i) => `m${i}`) }];
  const until = async (sql, values) => { while (!(await app.dataSource.query(sql, values))[0].done) await new Promise((r) => setTimeout(r, 2)); };
  const w = await app.startWorker('default');
  const turns = +(process.env.TURNS || 5);
  for (let turn = 0; turn <= turns; turn++) {
    events.length = 0;
    const t0 = performance.now();
    const { flowId } = await app.jobs.addFlow(fan);
    const added = performance.now();
    await until(`select state = 'completed' as done from ${SCHEMA}.flows where id = $1`, [flowId]);
    const t1 = performance.now();
    const d0 = performance.now();
    await app.addMany(0, 1000); await app.addMany(1000, 2);
    await until(`select not exists (select 1 from ${SCHEMA}.jobs) as done`, []);
    const d1 = performance.now();
    if (turn === 0) continue;
    console.log(`turn ${turn}: flow ${(t1 - t0).toFixed(1)} ms (add ${(added - t0).toFixed(1)}), drain ${(d1 - d0).toFixed(1)} ms, ratio ${((t1 - t0) / (d1 - d0)).toFixed(2)}`);
    if (process.env.TIMELINE) {
      const hits = events.filter((e) => e[0] === 'handler' && e[1] < t1).map((e) => e[1] - t0);
      console.log(`  handlers: first ${hits[0]?.toFixed(1)}, second ${hits[1]?.toFixed(1)}, last-but-one ${hits[hits.length - 2]?.toFixed(1)}, last ${hits[hits.length - 1]?.toFixed(1)} (${hits.length})`);
      for (const [l, a, b] of events.filter((e) => e[0] !== 'handler' && e[1] < t1 && !/flows where id/.test(e[0])).sort((x, y) => x[1] - y[1])) console.log(`  ${(a - t0).toFixed(1).padStart(7)} ${(b - a).toFixed(1).padStart(6)} ${l}`);
    }
  }
  await w.stop(); await app.close(); await dropDatabase(process.env.DATABASE_URL, 'bench_fan_probe');
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
