// Run after `npm run build`:
//   SERVER_URL=postgres://postgres@127.0.0.1:5432/postgres DB=hist_ab PAIRS=20 [KINDS=…] JOBS=20000 HISTORY=1000000 node apps/bench/probes/history-ab.cjs
// Lifecycle drain 3 against drain 1 (apps/bench/suite.ts runLifecycleDrains) without the load
// between them: two databases, DB_a with HISTORY completed jobs in finished_jobs (the bench's
// addHistory, loaded once, before any measured drain) and DB_b with none, one app on each (as
// the bench opens it), their pools never closing idle connections. Then PAIRS pairs of drains,
// a and b taking turns (ab, ba, ab, …), each by the lifecycle drains' steps (settleTables:
// VACUUM jobs + CHECKPOINT; JOBS jobs by addMany; worker and maintenance started; timed to the
// last handler start): what is left is the history's presence alone, not the load's
// after-effects nor fresh connections. Prints each drain, then the medians and a / b.
// KINDS=empty,history,empty-fresh,empty-load (default empty,history; each cycle runs them, the
// order rotated cycle by cycle) adds drains on DB_b that each have one of drain 3's other
// conditions: -fresh, the app pool's idle connections closed just before (what pg-pool's
// idleTimeoutMillis of 10 s does during the bench's 10 s load); -load, right after HISTORY rows
// were loaded (the bench's statement, then VACUUM ANALYZE) into a third database DB_c;
// -load-fresh, both, as in the bench's drain 3 (but with no history in DB_b).
const fs = require('fs');
const { Client } = require('pg');
const { openNestJobQueue } = require('../../../dist/apps/bench/system-nestjs-job-queue');
const { readBenchConfig } = require('../../../dist/apps/bench/config');
const { addInChunks, waitUntilNoJobs } = require('../../../dist/apps/bench/suite');
const { recreateDatabase, dropDatabase } = require('../../../dist/apps/bench/database');
const serverUrl = process.env.SERVER_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const DB = process.env.DB || 'hist_ab';
const PAIRS = +(process.env.PAIRS || 20);
const KINDS = (process.env.KINDS || 'empty,history').split(',');
const { createSchema } = require('../../../dist/apps/bench/sql-limit');
const { SCHEMA: S, TASK } = require('../../../dist/apps/bench/jobs-table');
const { ADD_HISTORY_SQL: HISTORY_SQL } = require('../../../dist/apps/bench/system-nestjs-job-queue');
const config = readBenchConfig([], process.env);
const TICK_MS = 10; // USER_HZ 100

const cpuMs = (pid) => {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) * TICK_MS;
  } catch { return 0; }
};
async function backendCpu(admin, db) {
  const pids = (await admin.query(`select pid from pg_stat_activity where datname = $1`, [db])).rows.map((r) => r.pid);
  return new Map(pids.map((pid) => [pid, cpuMs(pid)]));
}

async function drain(queue, admin, db) {
  await queue.lifecycle.settleTables();
  await addInChunks(queue, config.jobs, config.chunkSize);
  const before = await backendCpu(admin, db);
  const node0 = process.cpuUsage();
  queue.probe.reset();
  const startedAt = Date.now() / 1000;
  const started = performance.now();
  const worker = await queue.startWorker('default');
  await queue.probe.untilCount(config.jobs, 120_000);
  const perSecond = (config.jobs * 1000) / (performance.now() - started);
  const endedAt = Date.now() / 1000;
  await waitUntilNoJobs(queue);
  const node = process.cpuUsage(node0);
  const after = await backendCpu(admin, db);
  await worker.stop();
  let pg = 0;
  for (const [pid, ms] of after) pg += ms - (before.get(pid) ?? 0);
  return { startedAt, endedAt, perSecond, nodeMs: (node.user + node.system) / 1000, pgMs: pg, fresh: [...after.keys()].filter((pid) => !before.has(pid)).length };
}

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

(async () => {
  const dbs = { a: `${DB}_a`, b: `${DB}_b`, c: `${DB}_c` };
  const queues = {};
  const admin = new Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    for (const k of ['a', 'b']) {
      queues[k] = await openNestJobQueue(await recreateDatabase(serverUrl, dbs[k]), config);
      queues[k].dataSource.driver.master.options.idleTimeoutMillis = 0;
    }
    console.log(`JOBS=${config.jobs} HISTORY=${config.history} PAIRS=${PAIRS}: loading the history into ${dbs.a}`);
    await queues.a.lifecycle.addHistory(config.history);
    // warm-up: a drain on each (connections, plans)
    for (const k of ['a', 'b']) await drain(queues[k], admin, dbs[k]);
    const results = Object.fromEntries(KINDS.map((k) => [k, []]));
    const urlC = await recreateDatabase(serverUrl, dbs.c);
    if (KINDS.some((k) => k.includes('load'))) await createSchema(urlC);
    for (let i = 0; i < PAIRS; i++) {
      const order = KINDS.map((_, j) => KINDS[(i + j) % KINDS.length]);
      for (const kind of order) {
        const k = kind === 'history' ? 'a' : 'b';
        // the load first, then the connections closed: the order of the bench's drain 3
        if (kind === 'empty-load' || kind === 'empty-load-fresh') {
          const c = new Client({ connectionString: urlC });
          await c.connect();
          await c.query(`truncate ${S}.finished_jobs`);
          await c.query(HISTORY_SQL, [TASK, config.history]);
          await c.query(`vacuum analyze ${S}.finished_jobs`);
          await c.end();
        }
        if (kind === 'empty-fresh' || kind === 'empty-load-fresh') {
          const pool = queues.b.dataSource.driver.master;
          for (const item of [...pool._idle]) pool._remove(item.client);
        }
        const r = await drain(queues[k], admin, dbs[k]);
        results[kind].push(r);
        console.log(`cycle ${String(i + 1).padStart(2)} ${kind.padEnd(11)} ${Math.round(r.perSecond)} jobs/s  node cpu ${r.nodeMs.toFixed(0)} ms  postgres cpu ${r.pgMs} ms${r.fresh ? `  (${r.fresh} new backends)` : ''}${process.env.TIMES ? `  at ${r.startedAt.toFixed(3)}–${r.endedAt.toFixed(3)}` : ''}`);
      }
    }
    for (const kind of KINDS) {
      const rs = results[kind];
      const vsEmpty = rs.map((r, i) => r.perSecond / results.empty[i].perSecond);
      console.log(`${kind.padEnd(11)} median ${Math.round(median(rs.map((r) => r.perSecond)))} jobs/s (${Math.round(Math.min(...rs.map((r) => r.perSecond)))}–${Math.round(Math.max(...rs.map((r) => r.perSecond)))}), node cpu ${median(rs.map((r) => r.nodeMs)).toFixed(0)} ms, postgres cpu ${median(rs.map((r) => r.pgMs))} ms; against empty, cycle by cycle: median ${(median(vsEmpty) * 100).toFixed(1)} % (${(Math.min(...vsEmpty) * 100).toFixed(0)}–${(Math.max(...vsEmpty) * 100).toFixed(0)})`);
    }
  } finally {
    for (const k of ['a', 'b']) await queues[k]?.close();
    await admin.end();
    for (const k of ['a', 'b', 'c']) await dropDatabase(serverUrl, dbs[k]);
  }
})().catch((e) => { console.error(e); process.exit(1); });
