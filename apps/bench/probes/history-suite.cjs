// Run after `npm run build`:
//   SERVER_URL=postgres://postgres@127.0.0.1:5432/postgres DB=hist_suite ROUNDS=4 VARIANTS=bench,jitoff [ADDS=1] node apps/bench/probes/history-suite.cjs
// ADDS=1: each round starts with the bench's interleaved adds phase (adds-interleaved.ts) on DB, DB_gw and DB_raw.
// The bench's own suite for nestjs-job-queue alone (apps/bench/suite.ts runSuite: drain line, latency,
// then the lifecycle drains 1, 2, 3), each round on a fresh database DB, the variants taking turns
// round by round; prints drain 1, drain 3 and 3 / 1. JOBS, HISTORY, LATENCY_SAMPLES as for the bench.
// Variants (what changes against the bench):
//   bench     nothing
//   jitoff    ALTER DATABASE … SET jit = off before the app opens (every connection of the round)
//   sep       the history loaded (and VACUUM ANALYZEd) on a client of its own, not the app's pool
//   keepidle  the app pool's idleTimeoutMillis 0: no idle connection closed during the 10 s load
//   idle10    no history: the load replaced by 10 s of idling (as long as the load), so that the
//             pool's idle connections close as in 'bench' (pg-pool idleTimeoutMillis, 10 s)
//   explain   auto_explain on the round's database (nested statements, 3 ms and up, JIT shown):
//             read the server log after the mark 'hist-suite history loaded' (drain 3 follows it)
const { Client } = require('pg');
const { openNestJobQueue } = require('../../../dist/apps/bench/system-nestjs-job-queue');
const { readBenchConfig } = require('../../../dist/apps/bench/config');
const { runSuite } = require('../../../dist/apps/bench/suite');
const { recreateDatabase, dropDatabase } = require('../../../dist/apps/bench/database');
const { SCHEMA: S, TASK } = require('../../../dist/apps/bench/jobs-table');
const { measureAddsInterleaved } = require('../../../dist/apps/bench/adds-interleaved');
const serverUrl = process.env.SERVER_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const DB = process.env.DB || 'hist_suite';
const ROUNDS = +(process.env.ROUNDS || 3);
const VARIANTS = (process.env.VARIANTS || 'bench').split(',');
const config = readBenchConfig([], process.env);

const { ADD_HISTORY_SQL: HISTORY_SQL } = require('../../../dist/apps/bench/system-nestjs-job-queue');

async function withClient(url, use) {
  const c = new Client({ connectionString: url });
  await c.connect();
  try { return await use(c); } finally { await c.end(); }
}

const fs = require('fs');
const TICK_MS = 1000 / 100; // USER_HZ
/** CPU ms (user + system) of a process, or 0 if it is gone. */
function cpuMs(pid) {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) * TICK_MS;
  } catch { return 0; }
}
/** Every process's CPU ms and name, and the machine's CPU counters (/proc/stat: user, nice, system, idle, iowait, irq, softirq, steal). */
function allProcesses() {
  const procs = new Map();
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const raw = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const name = raw.slice(raw.indexOf('(') + 1, raw.lastIndexOf(')'));
      const f = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
      let cmd = name;
      try { cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim().slice(0, 60) || name; } catch {}
      procs.set(+pid, { name: cmd, ms: (Number(f[11]) + Number(f[12])) * TICK_MS });
    } catch {}
  }
  const cpu = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].split(/\s+/).slice(1, 9).map((x) => Number(x) * TICK_MS);
  return { procs, cpu };
}
function machineDelta(a, b, exclude) {
  const [user, nice, system, idle, iowait, irq, softirq, steal] = b.cpu.map((x, i) => x - a.cpu[i]);
  const others = [...b.procs].filter(([pid]) => !exclude.has(pid)).map(([pid, p]) => ({ pid, name: p.name, ms: p.ms - (a.procs.get(pid)?.ms ?? 0) })).filter((p) => p.ms > 0).sort((x, y) => y.ms - x.ms);
  return { busy: user + nice + system + irq + softirq, idle, iowait, steal, others };
}

/** The round database's backends, each with what it ran last (its role in the drain) and its CPU so far. */
async function backends(url) {
  const rows = (await withClient(url, (c) => c.query(`select pid, left(regexp_replace(query, '\\s+', ' ', 'g'), 40) as query from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()`))).rows;
  return new Map(rows.map((r) => [r.pid, { query: r.query, cpu: cpuMs(r.pid) }]));
}
/** Wraps startWorker so that each drain of `queue` reports the CPU its backends and this process used. */
function accountCpu(queue, url, drains, jobs) {
  // The snapshot before a drain is taken after its last addMany(), outside the bench's timed window.
  let pending;
  const addMany = queue.addMany;
  queue.addMany = async (from, count) => {
    const added = await addMany(from, count);
    if (from + count === jobs) pending = { before: await backends(url), machine0: allProcesses() };
    return added;
  };
  const start = queue.startWorker;
  queue.startWorker = async (...args) => {
    const { before, machine0 } = pending ?? { before: new Map(), machine0: allProcesses() };
    pending = undefined;
    const node0 = process.cpuUsage();
    const t0 = performance.now();
    let firstHit, lastHit, hits = 0;
    const hit = queue.probe.hit;
    queue.probe.hit = function () { const now = performance.now(); if (firstHit === undefined) firstHit = now; lastHit = now; hits++; return hit.call(this); };
    const worker = await start(...args);
    const startedMs = performance.now() - t0;
    return {
      stop: async () => {
        const wallMs = performance.now() - t0;
        const node = process.cpuUsage(node0);
        const machine1 = allProcesses();
        const after = await backends(url);
        await worker.stop();
        queue.probe.hit = hit;
        const per = [...after].map(([pid, a]) => ({ pid, query: a.query, ms: a.cpu - (before.get(pid)?.cpu ?? 0), fresh: !before.has(pid) })).filter((b) => b.ms > 0).sort((x, y) => y.ms - x.ms);
        const machine = machineDelta(machine0, machine1, new Set([process.pid, ...after.keys(), ...before.keys()]));
        drains.push({ machine, startedMs, firstHitMs: firstHit - t0, steadyPerSecond: ((hits - 1) * 1000) / (lastHit - firstHit), wallMs, nodeMs: (node.user + node.system) / 1000, pgMs: per.reduce((a, b) => a + b.ms, 0), per });
      },
    };
  };
}

async function round(variant) {
  // as a bench round starts: the interleaved adds of the three systems, ours on DB (recreated by the suite, as the bench does)
  if (process.env.ADDS === '1') await measureAddsInterleaved(serverUrl, { ours: DB, theirs: `${DB}_gw`, raw: `${DB}_raw` }, config, () => undefined);
  const url = await recreateDatabase(serverUrl, DB);
  if (variant === 'jitoff') await withClient(serverUrl, (c) => c.query(`alter database "${DB}" set jit = off`));
  if (variant === 'explain') {
    await withClient(serverUrl, async (c) => {
      for (const [k, v] of Object.entries({ session_preload_libraries: 'auto_explain', 'auto_explain.log_min_duration': '3ms', 'auto_explain.log_analyze': 'on',
        'auto_explain.log_timing': 'off', 'auto_explain.log_nested_statements': 'on' })) await c.query(`alter database "${DB}" set ${k} = '${v}'`);
    });
  }
  const queue = await openNestJobQueue(url, config);
  const drains = [];
  accountCpu(queue, url, drains, config.jobs);
  if (variant === 'keepidle') queue.dataSource.driver.master.options.idleTimeoutMillis = 0;
  const mark = (text) => withClient(url, (c) => c.query(`do $$ begin raise log 'hist-suite ${text}'; end $$`));
  if (variant === 'sep') {
    queue.lifecycle.addHistory = (rows) => withClient(url, async (c) => {
      await c.query(HISTORY_SQL, [TASK, rows]);
      await c.query(`vacuum analyze ${S}.finished_jobs`);
    });
  }
  if (variant === 'idle10') queue.lifecycle.addHistory = () => new Promise((r) => setTimeout(r, 10_000));
  if (variant === 'explain') {
    const { addHistory } = queue.lifecycle;
    queue.lifecycle.addHistory = async (rows) => { await addHistory(rows); await mark('history loaded'); };
  }
  try {
    const result = await runSuite(queue, ['default'], config, () => undefined);
    return { ...result.lifecycle, drains };
  } finally {
    await queue.close();
  }
}

(async () => {
  console.log(`JOBS=${config.jobs} HISTORY=${config.history} LATENCY_SAMPLES=${config.latencySamples} ROUNDS=${ROUNDS} VARIANTS=${VARIANTS.join(',')}`);
  const rows = Object.fromEntries(VARIANTS.map((v) => [v, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const variant of VARIANTS) {
      const l = await round(variant);
      const ratio = l.withHistoryPerSecond / l.defaultPerSecond;
      rows[variant].push(ratio);
      console.log(`round ${r + 1} ${variant.padEnd(8)} drain 1 ${Math.round(l.defaultPerSecond)}  drain 2 ${Math.round(l.withoutHistoryPerSecond)}  drain 3 ${Math.round(l.withHistoryPerSecond)}  3/1 ${(ratio * 100).toFixed(0)} %`);
      // drains of the main app: the drain line, lifecycle drain 1, lifecycle drain 3 (drain 2 is another app's)
      for (const [i, name] of [[1, 'drain 1'], [2, 'drain 3']]) {
        const d = l.drains[i];
        console.log(`    ${name}: start() ${d.startedMs.toFixed(1)} ms, first handler at ${d.firstHitMs.toFixed(1)} ms, then ${Math.round(d.steadyPerSecond)} jobs/s, wall to empty ${d.wallMs.toFixed(0)} ms, node cpu ${d.nodeMs.toFixed(0)} ms, postgres cpu ${d.pgMs.toFixed(0)} ms: ${d.per.map((b) => `${b.pid}${b.fresh ? '*' : ''} ${b.ms.toFixed(0)} [${b.query}]`).join('; ')}`);
        const m = d.machine;
        console.log(`      machine: busy ${m.busy.toFixed(0)} idle ${m.idle.toFixed(0)} iowait ${m.iowait.toFixed(0)} steal ${m.steal.toFixed(0)} ms; others: ${m.others.slice(0, 8).map((p) => `${p.name} ${p.ms.toFixed(0)}`).join('; ')}`);
      }
    }
  }
  const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
  for (const v of VARIANTS) console.log(`${v.padEnd(8)} 3/1 median ${(median(rows[v]) * 100).toFixed(0)} % (${rows[v].map((x) => (x * 100).toFixed(0)).join(', ')})`);
  for (const db of [DB, `${DB}_gw`, `${DB}_raw`]) await dropDatabase(serverUrl, db);
})().catch((e) => { console.error(e); process.exit(1); });
