// Run after `npm run build`:
//   DATABASE_URL=postgres://…/probe N=20000 HISTORY=1000000 STATES=empty,history,empty,history node apps/bench/probes/history.cjs
// (drops and recreates the job_queue schema of that database; needs a superuser for CHECKPOINT and the extensions).
// SQL-level probe of lifecycle drain 3 (apps/bench/suite.ts runLifecycleDrains): the SQL-limit loops
// (2 clients, claimJobs + releaseJobs keeping completed jobs) over N jobs, after the lifecycle
// drains' steps (VACUUM jobs, CHECKPOINT, N jobs inserted), with finished_jobs in one of these states:
//   empty            finished_jobs truncated, then VACUUM ANALYZE
//   history          truncated, HISTORY rows loaded as the bench's addHistory does, VACUUM ANALYZE
//   history+vacuum2  history, then a second VACUUM of finished_jobs
//   history+prewarm  history, then pg_prewarm of finished_jobs' indexes
//   history+evict    history, then a full pass over a scratch table to push finished_jobs out of shared_buffers
//   empty+fill       empty, then the same scratch-table pass (shared_buffers full of clean pages, none finished_jobs')
// Prints per drain: jobs/s, claim and release ms per batch, WAL records/FPI/bytes (pg_stat_wal),
// buffers allocated/written by backends (pg_stat_bgwriter), per relation/index heap and index block
// hits/reads (pg_statio_*), unused shared buffers at the start (pg_buffercache), and where the drain's
// rows went in finished_jobs' heap (blocks below the history's last block: put there by the FSM).
const { Client } = require('pg');
const { createQueries } = require('../../../dist/libs/job-queue/src/sql/queries');
const { CLAIM_SESSION_SETTINGS } = require('../../../dist/libs/job-queue/src/worker/claim-connection');
const { SCHEMA: S, TASK, insertJobs, settleJobsTable } = require('../../../dist/apps/bench/jobs-table');
const { createSchema } = require('../../../dist/apps/bench/sql-limit');
const { releaseParameters } = require('../../../dist/libs/job-queue/src/worker/release-parameters');
const sql = createQueries(S);
const url = process.env.DATABASE_URL;
const N = +(process.env.N || 20000), HISTORY = +(process.env.HISTORY || 1000000), BATCH = +(process.env.BATCH || 500), CLIENTS = +(process.env.CLIENTS || 2);
const STATES = (process.env.STATES || 'empty,history,empty,history,empty,history').split(',');
const EXPLAIN = !!process.env.EXPLAIN;
const release = (w, ids) => releaseParameters(w, { completed: ids.map((id) => ({ id, result: null })), failed: [], started: [], progress: new Map() }, true);

const { ADD_HISTORY_SQL: HISTORY_SQL } = require('../../../dist/apps/bench/system-nestjs-job-queue');

async function connect(settings) {
  const c = new Client({ connectionString: url });
  await c.connect();
  if (settings) await c.query(settings);
  return c;
}

async function snapshot(admin) {
  const one = async (text) => (await admin.query(text)).rows;
  const [wal] = await one(`select wal_records::bigint as records, wal_fpi::bigint as fpi, wal_bytes::bigint as bytes, wal_write::bigint as writes, wal_sync::bigint as syncs from pg_stat_wal`);
  const [bg] = await one(`select buffers_alloc::bigint as alloc, buffers_backend::bigint as backend_writes, buffers_clean::bigint as bgwriter_writes, buffers_checkpoint::bigint as ckpt_writes from pg_stat_bgwriter`);
  const rels = await one(`select relname as name, heap_blks_hit::bigint as hit, heap_blks_read::bigint as read, coalesce(idx_blks_hit,0)::bigint as ihit, coalesce(idx_blks_read,0)::bigint as iread from pg_statio_user_tables where schemaname = '${S}' and relname in ('jobs','finished_jobs','finished_counts')`);
  const idx = await one(`select indexrelname as name, idx_blks_hit::bigint as hit, idx_blks_read::bigint as read from pg_statio_user_indexes where schemaname = '${S}' and relname in ('jobs','finished_jobs')`);
  return { wal, bg, rels, idx };
}

function diff(a, b) {
  const d = (x, y) => Object.fromEntries(Object.keys(y).filter((k) => k !== 'name').map((k) => [k, Number(y[k]) - Number(x[k])]));
  const byName = (list) => Object.fromEntries(list.map((r) => [r.name, r]));
  const ar = byName(a.rels), ai = byName(a.idx);
  return {
    wal: d(a.wal, b.wal), bg: d(a.bg, b.bg),
    rels: b.rels.map((r) => ({ name: r.name, ...d(ar[r.name], r) })),
    idx: b.idx.map((r) => ({ name: r.name, ...d(ai[r.name], r) })).filter((r) => r.hit + r.read > 0),
  };
}

async function prepareState(admin, state) {
  await admin.query(`truncate ${S}.finished_jobs`); // the truncate trigger empties finished_counts
  if (state.startsWith('history')) {
    const t = performance.now();
    await admin.query(HISTORY_SQL, [TASK, HISTORY]);
    process.stdout.write(`  history: ${HISTORY} rows in ${((performance.now() - t) / 1000).toFixed(1)} s`);
  }
  let t = performance.now();
  await admin.query(`vacuum analyze ${S}.finished_jobs`);
  process.stdout.write(`  vacuum analyze ${((performance.now() - t) / 1000).toFixed(1)} s`);
  if (state.endsWith('+vacuum2')) { t = performance.now(); await admin.query(`vacuum ${S}.finished_jobs`); process.stdout.write(`  vacuum2 ${((performance.now() - t) / 1000).toFixed(1)} s`); }
  if (state.endsWith('+prewarm')) {
    const r = await admin.query(`select sum(pg_prewarm(c.oid))::bigint as blocks from pg_class c join pg_index i on i.indexrelid = c.oid where i.indrelid = '${S}.finished_jobs'::regclass`);
    process.stdout.write(`  prewarmed ${r.rows[0].blocks} index blocks`);
  }
  if (state.endsWith('+evict') || state.endsWith('+fill')) {
    // a table larger than shared_buffers, read with a plain index-free update so that it goes through shared buffers (not a ring)
    await admin.query(`select count(*) from pg_prewarm('hist_scratch'::regclass)`);
    process.stdout.write(`  scratch prewarmed`);
  }
  process.stdout.write('\n');
}

async function drain(state) {
  // the state is made on a connection of its own, ended before the first snapshot: its block counts (the load, VACUUM ANALYZE) are flushed by then
  const prep = await connect();
  await prepareState(prep, state);
  const [{ last_block: lastBlock }] = (await prep.query(`select (pg_relation_size('${S}.finished_jobs') / 8192)::int as last_block`)).rows;
  await settleJobsTable(prep);
  await insertJobs(prep, N);
  const [{ unused, dirty, fj }] = (await prep.query(`select count(*) filter (where relfilenode is null)::int as unused, count(*) filter (where isdirty)::int as dirty,
      count(*) filter (where relfilenode in (select pg_relation_filenode(c.oid) from pg_class c where c.relnamespace = '${S}'::regnamespace and (c.oid = '${S}.finished_jobs'::regclass or c.oid in (select indexrelid from pg_index where indrelid = '${S}.finished_jobs'::regclass))))::int as fj
      from pg_buffercache`)).rows;
  await prep.end();
  await new Promise((r) => setTimeout(r, 300)); // the backend flushes its stats as it exits
  const admin = await connect();
  // fresh connections: their stats are flushed when they end, before the second snapshot
  const clients = [], claimers = [];
  for (let i = 0; i < CLIENTS; i++) { clients.push(await connect()); claimers.push(await connect(CLAIM_SESSION_SETTINGS)); }
  for (let i = 0; i < CLIENTS; i++) await clients[i].query({ text: sql.registerWorker, values: [`hist-${i}`, 20000, null, null, null] });
  let explained = null;
  if (EXPLAIN) {
    // one flush of BATCH completions, EXPLAIN (ANALYZE, BUFFERS): outside the timed loop, so jobs/s is of the rest
    const c = await claimers[0].query({ name: 'claim', text: sql.claimJobs, values: [[TASK], [], BATCH, 'hist-0', BATCH, []] });
    const plan = await clients[0].query({ text: `explain (analyze, buffers, wal, timing off, costs off) ${sql.releaseJobs}`, values: release('hist-0', c.rows.map((r) => r.id)) });
    explained = plan.rows.map((r) => r['QUERY PLAN']);
  }
  const before = await snapshot(admin);
  const t0 = performance.now();
  const loops = await Promise.all(clients.map(async (client, i) => {
    let done = 0, claimMs = 0, releaseMs = 0, batches = 0;
    for (;;) {
      let t = performance.now();
      const c = await claimers[i].query({ name: 'claim', text: sql.claimJobs, values: [[TASK], [], BATCH, `hist-${i}`, BATCH, []] });
      claimMs += performance.now() - t;
      if (c.rows.length === 0) return { done, claimMs, releaseMs, batches };
      let ids = c.rows.map((r) => r.id);
      t = performance.now();
      while (ids.length > 0) {
        const r = await client.query({ name: 'release', text: sql.releaseJobs, values: release(`hist-${i}`, ids) });
        done += r.rows[0].released;
        ids = r.rows[0].busy;
      }
      releaseMs += performance.now() - t;
      batches++;
    }
  }));
  const ms = performance.now() - t0;
  await Promise.all([...clients, ...claimers].map((c) => c.end()));
  await new Promise((r) => setTimeout(r, 300));
  const after = await snapshot(admin);
  const [{ below, newrows }] = (await admin.query(`select count(*) filter (where (ctid::text::point)[0] < $1)::int as below, count(*)::int as newrows from ${S}.finished_jobs where worker_id like 'hist-%'`, [lastBlock])).rows;
  await admin.end();
  const done = loops.reduce((a, l) => a + l.done, 0);
  const batches = loops.reduce((a, l) => a + l.batches, 0);
  return {
    state, jobsPerSecond: Math.round((done * 1000) / ms), done,
    claimMs: +(loops.reduce((a, l) => a + l.claimMs, 0) / batches).toFixed(2), releaseMs: +(loops.reduce((a, l) => a + l.releaseMs, 0) / batches).toFixed(2),
    buffersAtStart: { unused, dirty, finishedJobs: fj }, rowsBelowHistoryEnd: `${below}/${newrows}`, ...diff(before, after), explained,
  };
}

(async () => {
  const admin = await connect();
  await admin.query(`drop schema if exists ${S} cascade`);
  await admin.query(`create extension if not exists pg_buffercache; create extension if not exists pg_prewarm`);
  await createSchema(url);
  if (STATES.some((s) => s.endsWith('+evict') || s.endsWith('+fill'))) {
    await admin.query(`drop table if exists hist_scratch; create table hist_scratch as select i, repeat('x', 200) as pad from generate_series(1, 1000000) i`); // ~250 MB
  }
  const settings = (await admin.query(`select string_agg(name || '=' || setting || coalesce(unit, ''), ' ') as s from pg_settings where name in ('shared_buffers','max_wal_size','full_page_writes','wal_compression','autovacuum','synchronous_commit','wal_buffers','bgwriter_lru_maxpages')`)).rows[0].s;
  console.log(`N=${N} HISTORY=${HISTORY} BATCH=${BATCH} CLIENTS=${CLIENTS}; ${settings}`);
  await admin.end();
  const results = [];
  for (const state of STATES) {
    const r = await drain(state);
    results.push(r);
    const rel = (name) => r.rels.find((x) => x.name === name) || {};
    const fj = rel('finished_jobs');
    console.log(`${state.padEnd(16)} ${String(r.jobsPerSecond).padStart(6)} jobs/s  claim ${r.claimMs} ms  release ${r.releaseMs} ms  wal: ${r.wal.records} rec ${r.wal.fpi} fpi ${(r.wal.bytes / 1048576).toFixed(1)} MB ${r.wal.writes} writes ${r.wal.syncs} syncs  bufs: alloc ${r.bg.alloc} backend-writes ${r.bg.backend_writes} bgwriter ${r.bg.bgwriter_writes} ckpt ${r.bg.ckpt_writes}  at start unused ${r.buffersAtStart.unused} dirty ${r.buffersAtStart.dirty} fj ${r.buffersAtStart.finishedJobs}  rows below history end ${r.rowsBelowHistoryEnd}`);
    console.log(`    finished_jobs heap hit/read ${fj.hit}/${fj.read}  idx ${fj.ihit}/${fj.iread}; ` + r.idx.map((i) => `${i.name} ${i.hit}/${i.read}`).join(', '));
    if (r.explained) {
      // the insert into finished_jobs (CTE kept), the delete from jobs (CTE finished), the totals
      const at = (re) => r.explained.findIndex((l) => re.test(l));
      const node = (i) => r.explained.slice(i, i + 3).map((l) => l.trim()).join('; ');
      console.log(`    explain: insert: ${node(at(/Insert on finished_jobs/))}\n             delete: ${node(at(/Delete on jobs/))}\n             total: ${r.explained.slice(1, 3).map((l) => l.trim()).join('; ')}; ${r.explained.filter((l) => /Trigger|Execution Time/.test(l)).map((l) => l.trim()).join('; ')}`);
      if (process.env.EXPLAIN === 'full') console.log(r.explained.map((l) => `      ${l}`).join('\n'));
    }
  }
  if (process.env.JSON) require('fs').writeFileSync(process.env.JSON, JSON.stringify(results, null, 2));
})().catch((e) => { console.error(e); process.exit(1); });
