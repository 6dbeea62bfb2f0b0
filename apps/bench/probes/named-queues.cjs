// Run after `npm run build`:
//   DATABASE_URL=postgres://…/probe [BASE=/path/to/another/build] [LAYOUT=big|many|manyq|mid|none] [HELD=1] [UNQUEUED=10000] node apps/bench/probes/named-queues.cjs
// (drops and recreates the job_queue schema of that database).
// SQL-level probe of the claim's cost on named-queue layouts: a claim of 100 (rolled back),
// median of ITER runs (SIZE jobs each, default 100) on one connection with the claim settings. Layouts, all queued jobs
// ahead of UNQUEUED unqueued ones in fetch order: big = one queue of 100,000; many = 10,000
// queues of 1; manyq = 10,000 queues of 10; mid = 1,000 queues of 100; none = no queue.
// HELD=1: each queue's head is held by another worker (its queue row locked), as while it runs.
// BASE: also times the claim of the build in that folder (a `git worktree` of an older commit,
// built), alternating with this one; its index jobs_fetch_idx is created if this schema lacks it.
const { Client } = require('pg');
const { join } = require('path');
const { SCHEMA: S, TASK, settleJobsTable } = require('../../../dist/apps/bench/jobs-table');
const { createSchema } = require('../../../dist/apps/bench/sql-limit');
const url = process.env.DATABASE_URL;
const SIZE = +(process.env.SIZE || 100), LAYOUT = process.env.LAYOUT || 'big', HELD = !!+(process.env.HELD || 0), ITER = +(process.env.ITER || 17);
const LAYOUTS = { big: [1, 100000], many: [10000, 1], manyq: [10000, 10], mid: [1000, 100], none: [0, 0] };
const build = (dir) => ({
  claim: require(join(dir, 'dist/libs/job-queue/src/sql/queries')).createQueries(S).claimJobs,
  settings: require(join(dir, 'dist/libs/job-queue/src/worker/claim-connection')).CLAIM_SESSION_SETTINGS,
});
const claims = [['this', build(join(__dirname, '../../..'))]];
if (process.env.BASE) claims.unshift(['base', build(process.env.BASE)]);
(async () => {
  const admin = new Client({ connectionString: url });
  await admin.connect();
  await admin.query(`drop schema if exists ${S} cascade`);
  await createSchema(url);
  if (process.env.BASE) await admin.query(`create index if not exists jobs_fetch_idx on ${S}.jobs (priority, run_at, id) include (task_identifier, queue_name) where is_available`);
  const [queues, each] = LAYOUTS[LAYOUT];
  if (queues) {
    await admin.query(
      `insert into ${S}.jobs (task_identifier, payload, queue_name, run_at)
       select $1, '{}', 'q' || (i % $3), now() - interval '1 hour' + i * interval '1 millisecond' from generate_series(1, $2::int) i`,
      [TASK, queues * each, queues],
    );
  }
  await admin.query(`insert into ${S}.jobs (task_identifier, payload) select $1, '{}' from generate_series(1, $2::int)`, [TASK, +(process.env.UNQUEUED || 10000)]);
  if (HELD && queues) {
    await admin.query(`insert into ${S}.workers (id) values ('other')`);
    await admin.query(`insert into ${S}.job_queues (queue_name, locked_at, locked_by) select 'q' || i, now(), 'other' from generate_series(0, $1::int - 1) i`, [queues]);
    await admin.query(`update ${S}.jobs set locked_at = now(), locked_by = 'other', attempts = 1 where id in (select min(id) from ${S}.jobs where queue_name is not null group by queue_name)`);
  }
  await settleJobsTable(admin, { analyze: true });
  await admin.query(`insert into ${S}.workers (id) values ('w')`);
  // Each build's claim on a connection of its own, with that build's claim settings.
  const connections = new Map();
  for (const [name, { settings }] of claims) {
    const c = new Client({ connectionString: url });
    await c.connect();
    await c.query(settings);
    connections.set(name, c);
  }
  for (const [name, { claim: text }] of [...claims, ...claims]) {
    const c = connections.get(name);
    const times = [];
    let claimed = [];
    for (let i = 0; i < ITER; i++) {
      const started = performance.now();
      await c.query('begin');
      claimed = (await c.query({ name, text, values: [[TASK], [], SIZE, 'w', SIZE] })).rows;
      await c.query('rollback');
      times.push(performance.now() - started);
    }
    times.sort((a, b) => a - b);
    const queued = claimed.filter((row) => row.queue_name).length;
    console.log(`${LAYOUT}${HELD ? ' held' : ''} ${name}: claim of ${claimed.length} (${queued} queued), median ${times[times.length >> 1].toFixed(2)} ms`);
  }
  await Promise.all([admin, ...connections.values()].map((client) => client.end()));
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
