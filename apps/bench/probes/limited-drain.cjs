// Run after `npm run build`, from the repository:
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres [PROCS=3] [GC=10|none] [MS=0] [N=3000] [ROUNDS=3] \
//     node apps/bench/probes/limited-drain.cjs
// A rough drain of a task with a globalConcurrency (docs/guides/limits.md) across PROCS worker
// processes of the tests' worker app (test/support/worker-process.ts, LIMITED=1, concurrency 10,
// pollInterval 200 ms): N `limited` jobs of MS ms each (the handler also writes a start and an end
// row), added by addMany() in calls of 1,000 and timed, adds included, until the jobs table is
// empty; ROUNDS rounds, each printed, then the median. GC=none runs the same handler with no limit,
// to compare with (PROCS=1 GC=none: one unlimited worker of concurrency 10). RATE=<max>/<per ms>
// adds that rateLimit (with GC=none: the rate alone) and prints, per round, the most starts in
// any closed window of `per` (by the jobs' started_at) and how much of the rate the drain used
// (jobs / (the first to the last start, in windows) / max).
const { join } = require('path');
const support = join(__dirname, '../../../dist/test/support');
const { startWorkerProcesses, stopWorkerProcesses } = require(join(support, 'worker-processes'));
const { createTestDatabase, connect } = require(join(support, 'database'));
const { createTestApp } = require(join(support, 'app'));

const N = +(process.env.N || 3000);
const ROUNDS = +(process.env.ROUNDS || 3);
const PROCS = +(process.env.PROCS || 3);
const GC = process.env.GC || '10';
const MS = +(process.env.MS || 0);
const CONCURRENCY = +(process.env.CONCURRENCY || 10);
const RATE = process.env.RATE;
// TASK=noop: the tests' do-nothing task instead (no rows written by the handler), its rate and its globalConcurrency set by setTaskLimits.
const TASK = process.env.TASK || 'limited';

(async () => {
  const db = await createTestDatabase('limited_drain');
  const sql = await connect(db.url);
  await sql.query('create table limited_runs (job_id bigint not null, pid int not null, attempt int not null, started_at timestamptz not null, ended_at timestamptz, group_key text)');
  const t = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: ['limited', 'noop'] } });
  const processes = await startWorkerProcesses(PROCS, { url: db.url, concurrency: CONCURRENCY, env: { LIMITED: '1', GLOBAL_CONCURRENCY: GC, ...(RATE && TASK === 'limited' ? { RATE_LIMIT: RATE } : {}) } });
  if (TASK === 'noop' && RATE) {
    const [max, per] = RATE.split('/').map(Number);
    await t.jobs.setTaskLimits('noop', { rateLimit: { max, per } });
  }
  if (TASK === 'noop' && GC !== 'none') await t.jobs.setTaskLimits('noop', { globalConcurrency: +GC });
  const rates = [];
  for (let round = 0; round < ROUNDS; round++) {
    const started = Date.now();
    const ids = [];
    for (let i = 0; i < N; i += 1000) {
      ids.push(...(await t.jobs.addMany(Array.from({ length: Math.min(1000, N - i) }, () => ({ identifier: TASK, payload: { ms: MS } })))).map((job) => job.id));
    }
    while ((await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n > 0) await new Promise((resolve) => setTimeout(resolve, 10));
    rates.push(Math.round(N / ((Date.now() - started) / 1000)));
    let rate = '';
    if (RATE) {
      const [max, per] = RATE.split('/').map(Number);
      const { rows: [w] } = await sql.query(
        `with s as (select started_at from job_queue.finished_jobs where id = any($1::bigint[]))
         select (select max((select count(*) from s o where o.started_at between x.started_at and x.started_at + $2 * interval '1 millisecond')) from s x)::int as most,
           (extract(epoch from max(started_at) - min(started_at)) * 1000)::float8 as span_ms from s`,
        [ids, per],
      );
      // N starts need (N / max − 1) whole windows after the first start: the span a rate used to the full takes.
      rate = `; most in a window of ${per} ms ${w.most} (limit ${max}); rate used ${((100 * ((N / max - 1) * per)) / w.span_ms).toFixed(1)} %`;
    }
    console.log(`TASK=${TASK} PROCS=${PROCS} GC=${GC} MS=${MS}${RATE ? ` RATE=${RATE}` : ''} round ${round + 1}: ${rates.at(-1)} jobs/s${rate}`);
  }
  console.log(`median ${[...rates].sort((a, b) => a - b)[Math.floor(rates.length / 2)]} jobs/s`);
  for (const p of processes) await p.terminate();
  await stopWorkerProcesses();
  await t.close();
  await sql.end();
  await db.drop();
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
