// Run after `npm run build`, from the repository:
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres [TENANTS=10000] [PER=3] node apps/bench/probes/group-claim.cjs
// Times the claim of a group-limited task (sql claimGroupedJobs, docs/guides/limits.md "Limits
// per group") with TENANTS groups of PER (3) jobs each, one of each running, in the claim
// connection's session settings: every group at its limit (groupConcurrency 1: nothing to claim,
// the walk of every group for nothing), then with room (groupConcurrency 1000: 100 claimed of
// TENANTS candidates), each the median of 7 (rolled back); then the plan's index use.
const { join } = require('path');
const dist = join(__dirname, '..', '..', '..', 'dist');
const { createTestDatabase, connect } = require(join(dist, 'test', 'support', 'database'));
const { createTestApp } = require(join(dist, 'test', 'support', 'app'));
const { createQueries } = require(join(dist, 'libs', 'job-queue', 'src', 'sql', 'queries'));
(async () => {
  const G = Number(process.env.TENANTS ?? 10000);
  const PER = Number(process.env.PER ?? 3);
  const db = await createTestDatabase('probe_groups');
  const app = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: ['t'] } });
  await app.close();
  const sql = await connect(db.url);
  await sql.query(`insert into job_queue.workers (id) values ('w') on conflict do nothing`);
  await sql.query(`insert into job_queue.jobs (task_identifier, payload, group_key) select 't', '{}', 'g' || (i % $1::int) from generate_series(1, $1::int * $2::int) i`, [G, PER]);
  // every group holds one running job: capped at groupConcurrency 1 → nothing to claim, the worst case walk
  await sql.query(`update job_queue.jobs set locked_by = 'w', locked_at = now(), attempts = 1 where id in (select min(id) from job_queue.jobs group by group_key)`);
  await sql.query('vacuum analyze job_queue.jobs');
  const text = createQueries('job_queue').claimGroupedJobs;
  for (const s of ['set enable_bitmapscan = off', 'set enable_sort = off', 'set enable_seqscan = off', 'set jit = off', 'set plan_cache_mode = force_generic_plan']) await sql.query(s);
  for (const [label, limit] of [['capped (limit 1)', 1], ['room (limit 1000)', 1000]]) {
    const times = [];
    for (let i = 0; i < 7; i++) {
      await sql.query('begin');
      const t0 = process.hrtime.bigint();
      const r = await sql.query({ name: 'c' + limit, text, values: ['t', [], 100, 'w', 100, limit, null, null, []] });
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
      await sql.query('rollback');
      if (i === 0) console.log(label, 'claimed', r.rowCount);
    }
    times.sort((a, b) => a - b);
    console.log(label, `groups ${G}: median ${times[3].toFixed(1)} ms`);
  }
  const plan = await sql.query({ text: 'explain (analyze, costs off) ' + text.replace(/\$(\d+)/g, (m, n) => ({ 1: "'t'", 2: "'{}'::text[]", 3: '100', 4: "'w'", 5: '100', 6: '1000', 7: 'null', 8: 'null', 9: "'{}'::bigint[]" })[n]) });
  console.log(plan.rows.map((r) => r['QUERY PLAN']).filter((l) => /Index|Seq|Sort|Bitmap|Execution/.test(l)).join('\n'));
  await sql.end();
  await db.drop();
})().catch((e) => { console.error(e); process.exit(1); });
