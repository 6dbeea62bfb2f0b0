import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { JobQueueMigrations, runJobQueueMigrations } from '../../libs/job-queue/src';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { CLAIM_SESSION_SETTINGS } from '../../libs/job-queue/src/worker/claim-connection';
import type { ClaimedRow } from '../../libs/job-queue/src/worker/claimed-job';
import { completeClaimed } from './complete-claimed';
import type { BenchConfig } from './config';
import { insertJobs, SCHEMA, TASK } from './jobs-table';
import { measureSqlLatency, type SqlLatencyResult } from './sql-latency';
import { perSecond, type Progress } from './suite';

/** The library's own statement texts, run here on plain node-pg clients. */
const sql = createQueries(SCHEMA);

/** What our drain should approach: the same statements with no library around them (add()'s insert: plain-sql-add.ts). */
export interface SqlLimitResult {
  /** `sqlClients` loops of claim a batch (claimJobs) then complete it (releaseJobs, keeping them in finished_jobs). */
  drainPerSecond: number;
  /** A job's wait from its add to its claim, one at a time, through the SQL alone (sql-latency.ts). */
  latency: SqlLatencyResult;
}

/**
 * On a fresh database with our schema (made by the library's migrations; setup only), with
 * no Nest, no TypeORM and no worker on the measured path: plain node-pg clients running the
 * library's statements as named prepared statements, as the library does.
 */
export async function runSqlLimit(url: string, config: BenchConfig, progress: Progress): Promise<SqlLimitResult> {
  await createSchema(url);
  const clients: Client[] = [];
  // Each loop claims on a connection of its own with the worker's claim settings, as the worker does.
  const claimClients: Client[] = [];
  try {
    for (let i = 0; i < config.sqlClients; i++) {
      clients.push(new Client({ connectionString: url }));
      await clients[i].connect();
      claimClients.push(new Client({ connectionString: url }));
      await claimClients[i].connect();
      await claimClients[i].query(CLAIM_SESSION_SETTINGS);
    }
    await insertJobs(clients[0], config.jobs);
    progress(`plain SQL: claim + complete loops on ${config.sqlClients} clients, ${config.jobs} jobs in batches of ${config.sqlBatchSize}`);
    const drainPerSecond = await measureClaimCompleteLoops(clients, claimClients, config);
    progress(`plain SQL: latency add → claim through NOTIFY, ${config.latencySamples} samples, our statements and the least SQL`);
    return { drainPerSecond, latency: await measureSqlLatency(url, config.latencySamples) };
  } finally {
    await Promise.all([...clients, ...claimClients].map((client) => client.end().catch(() => undefined)));
  }
}

/**
 * From the first claim until every job is completed, each client looping on its own: claim up
 * to `sqlBatchSize` jobs (FOR UPDATE SKIP LOCKED), then complete them with the release
 * batcher's statement, keep-completed on ($11) as with the default retention: each job moves
 * to finished_jobs as completed, as in our default drain. A client stops when its claim finds
 * nothing left: jobs/s. (Our drain stops its clock when the last handler starts, before the
 * last release is written: if anything, the comparison flatters us by one flush.)
 */
async function measureClaimCompleteLoops(clients: Client[], claimClients: Client[], config: BenchConfig): Promise<number> {
  const started = performance.now();
  const counts = await Promise.all(clients.map((client, i) => claimCompleteLoop(claimClients[i], client, `bench-sql-${i}`, config.sqlBatchSize)));
  const ms = performance.now() - started;
  const total = counts.reduce((a, b) => a + b, 0);
  if (total !== config.jobs) throw new Error(`plain SQL: completed ${total} jobs, expected ${config.jobs}`);
  return perSecond(total, ms);
}

async function claimCompleteLoop(claimClient: Client, client: Client, workerId: string, batchSize: number): Promise<number> {
  // claims require the worker's row, as a worker's do; every job claimed is marked started (as for free slots)
  await client.query({ name: 'bench_register', text: sql.registerWorker, values: [workerId, 20_000, null, null, null] });
  let done = 0;
  for (;;) {
    const claimed = await claimClient.query<ClaimedRow>({ name: 'bench_claim', text: sql.claimJobs, values: [[TASK], [], batchSize, workerId, batchSize, []] });
    if (claimed.rows.length === 0) return done;
    done += await completeClaimed(client, workerId, claimed.rows);
  }
}

/** Our schema on the database at `url`, by the library's migrations (also what probes/backlog.cjs runs). */
export async function createSchema(url: string): Promise<void> {
  const dataSource = new DataSource({ type: 'postgres', url });
  await dataSource.initialize();
  try {
    await runJobQueueMigrations(dataSource, SCHEMA, JobQueueMigrations);
  } finally {
    await dataSource.destroy();
  }
}
