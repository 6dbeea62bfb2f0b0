/**
 * `npm run chaos`: a randomized fault soak with an invariant checker (docs/guarantees.md#chaos).
 * On a private PostgreSQL: three worker processes (chaos-worker.ts; the first behind a
 * LossyProxy) and a producer process (chaos-producer.ts) for CHAOS_MS (default 2 minutes),
 * while faults.ts causes one fault after another; then the producer stops, every fault heals,
 * the jobs drain, and invariants.ts judges the ledger. Prints the seed first: CHAOS_SEED=<seed>
 * replays the run's choices (which fault, which process, what the producers add; the timing is
 * the machine's). Exits 1 on any violation.
 */
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { createJobQueueMigrations, runJobQueueMigrations } from '../../libs/job-queue/src';
import { PrivatePostgres } from '../support/private-postgres';
import { LossyProxy } from '../support/tcp-proxy';
import { FaultInjector, FAULT_KINDS } from './faults';
import { Checker } from './invariants';
import { createLedger, WORKER_TIMEOUT_MS } from './ledger';
import { ChaosProcess, type Crash } from './processes';
import { Random } from './random';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitUntil(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return true;
    await sleep(200);
  }
  console.log(`gave up waiting ${timeoutMs / 1000} s for ${what}`);
  return false;
}

async function main(): Promise<number> {
  const seed = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
  const runMs = Number(process.env.CHAOS_MS ?? 120_000);
  console.log(`chaos seed ${seed} (replay: CHAOS_SEED=${seed}), ${runMs / 1000} s of faults`);
  const random = new Random(seed);
  const crashes: Crash[] = [];
  const postgres = await PrivatePostgres.start();
  const proxy = await LossyProxy.start({ host: '127.0.0.1', port: Number(new URL(postgres.url).port) }, 'candidate_count');
  const proxiedUrl = Object.assign(new URL(postgres.url), { port: String(proxy.port) }).toString();
  const workers: ChaosProcess[] = [];
  let producer: ChaosProcess | undefined;
  let generation = 0;
  const startWorker = async (slot: number) => {
    const url = slot === 0 ? proxiedUrl : postgres.url;
    workers[slot] = new ChaosProcess(`worker-${slot + 1}-${++generation}`, 'chaos-worker.js', { DATABASE_URL: url }, crashes);
    await workers[slot].ready();
  };
  try {
    const setup = new DataSource({ type: 'postgres', url: postgres.url });
    await setup.initialize();
    await runJobQueueMigrations(setup, 'job_queue', createJobQueueMigrations());
    await setup.destroy();
    const sql = new Client({ connectionString: postgres.url });
    await sql.connect();
    await createLedger(sql);
    await sql.end();

    await Promise.all([0, 1, 2].map(startWorker));
    producer = new ChaosProcess('producer', 'chaos-producer.js', { DATABASE_URL: postgres.url, SEED: String(seed) }, crashes);
    await producer.ready();

    const injector = new FaultInjector(random, { postgres, proxy, workers, producer, replaceWorker: startWorker });
    const started = Date.now();
    while (Date.now() - started < runMs) {
      await sleep(random.int(1000, 4000));
      if (Date.now() - started >= runMs) break;
      // a worker that crashed is started again, so that the run goes on (the crash is reported)
      for (const [slot, w] of workers.entries()) if (w.child.exitCode !== null || w.child.signalCode !== null) await startWorker(slot);
      await injector.next((Date.now() - started) / runMs);
    }

    console.log('faults over; stopping the producer, waiting for the jobs to drain');
    await producer.stop(30_000);
    console.log(/^stats .*/m.exec(producer.output)?.[0] ?? 'the producer printed no stats');
    if (process.env.CHAOS_VERBOSE) console.log(producer.output);
    const check = new Client({ connectionString: postgres.url });
    await check.connect();
    try {
      const count = async (text: string) => (await check.query<{ n: number }>(text)).rows[0].n === 0;
      await waitUntil('the jobs to drain', 180_000, () =>
        count(`select ((select count(*) from job_queue.jobs where task_identifier <> 'chaos.tick') + (select count(*) from job_queue.blocked_jobs))::int as n`),
      );
      // killed and fenced workers' rows go with the sweep, workerTimeout after their last heartbeat
      await waitUntil('stale worker rows to be swept', 4 * WORKER_TIMEOUT_MS, () =>
        count(`select count(*)::int - 0 as n from job_queue.workers where heartbeat_at < now() - interval '3 seconds'`),
      );
      await waitUntil('three worker rows', 4 * WORKER_TIMEOUT_MS, async () => (await check.query(`select count(*)::int as n from job_queue.workers`)).rows[0].n === 3);
      for (const f of injector.faults) {
        await check.query('insert into chaos.faults (kind, pid, started_at, ended_at, detail) values ($1, $2, $3, $4, $5)', [f.kind, f.pid, f.startedAt, f.endedAt, f.detail ?? null]);
      }
      const stats = /^stats (.*)$/m.exec(producer.output)?.[1];
      const checks = await new Checker(check, injector.faults, crashes, stats ? JSON.parse(stats).errors : undefined, runMs >= 100_000).run();
      const faultCounts = FAULT_KINDS.map((kind) => `${kind} ${injector.faults.filter((f) => f.kind === kind).length}`).join(', ');
      console.log(`\nchaos seed ${seed}, ${runMs / 1000} s; faults: ${faultCounts}`);
      const failedChecks = checks.some((c) => c.violations.length > 0);
      if (failedChecks || process.env.CHAOS_VERBOSE) for (const f of injector.faults) console.log(`fault ${f.kind} pid ${f.pid} ${f.startedAt.toISOString()} → ${f.endedAt.toISOString()} ${f.detail ?? ''}`);
      for (const c of checks) {
        console.log(`${c.violations.length === 0 ? 'ok  ' : 'FAIL'} ${c.name}: ${c.counts}${c.violations.length ? `; ${c.violations.length} violations` : ''}`);
        for (const v of c.violations.slice(0, 10)) console.log(`       ${v}`);
      }
      const failed = checks.filter((c) => c.violations.length > 0).length;
      if (failed > 0) await printDiagnostics(check, workers, checks.flatMap((c) => c.violations));
      console.log(failed === 0 ? `chaos: every invariant held (seed ${seed})` : `chaos: ${failed} invariants violated (seed ${seed}; replay with CHAOS_SEED=${seed})`);
      return failed === 0 ? 0 : 1;
    } finally {
      await check.end();
    }
  } finally {
    await Promise.all([...workers, ...(producer ? [producer] : [])].map((p) => p.stop(5000)));
    await proxy.stop();
    await postgres.destroy();
  }
}

/** After a violation: what the workers printed last, and where the unfinished jobs are. */
async function printDiagnostics(sql: Client, workers: ChaosProcess[], violations: string[]): Promise<void> {
  // the story of the first jobs named in violations: their attempts, their end, what the workers said of them
  const keys = [...new Set(violations.join(' ').match(/\b(p\d-\d+(:[a-d])?|keyed-\d+)\b/g) ?? [])].slice(0, 4);
  for (const key of keys) {
    console.log(`\n--- ${key}:`);
    console.table((await sql.query('select id, job_id, pid, attempt, started_at, ended_at, outcome, (select at from chaos.effects e where e.attempt_id = a.id) as effect_at from chaos.attempts a where key = $1 order by id', [key])).rows);
    const jobIds = (await sql.query('select job_id from chaos.produced where key = $1', [key])).rows.map((r) => r.job_id);
    console.log(JSON.stringify((await sql.query('select id, state, attempts, errors, worker_id from job_queue.finished_jobs where id = any($1)', [jobIds])).rows));
    console.table((await sql.query('select * from chaos.worker_events where job_id = any($1)', [jobIds])).rows);
  }
  console.log('\n--- fences and rescues:');
  console.table((await sql.query(`select pid, type, count(*)::int as n, min(at) as first, max(at) as last from chaos.worker_events group by 1, 2 order by 4`)).rows);
  for (const w of workers) console.log(`\n--- ${w.name} (pid ${w.pid}), its last output:\n${w.output.slice(-4000)}`);
  const jobs = await sql.query(
    `select task_identifier, queue_name is not null as queued, locked_by, attempts, run_at <= now() as due, is_available, count(*)::int as n
     from job_queue.jobs group by 1, 2, 3, 4, 5, 6 order by n desc limit 20`,
  );
  console.log('\n--- unfinished jobs:');
  console.table(jobs.rows);
  console.table((await sql.query('select * from job_queue.workers')).rows);
  // how the named queues moved: their attempts, how long each ran, and the gap before the next one started
  const queues = await sql.query(
    `select queue_name, count(*)::int as attempts, round(avg(extract(epoch from ended_at - started_at) * 1000)) as run_ms,
            round(avg(gap_ms)) as gap_ms, round(max(gap_ms)) as max_gap_ms
     from (select *, extract(epoch from started_at - lag(ended_at) over (partition by queue_name order by started_at)) * 1000 as gap_ms
           from chaos.attempts where kind = 'queued') a group by 1 order by 1`,
  );
  console.table(queues.rows);
  console.table((await sql.query('select * from job_queue.job_queues')).rows);
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(error);
    process.exit(2);
  },
);
