/**
 * `npm run bench`: this library's worker against graphile-worker, on the same PostgreSQL in
 * the same run (DATABASE_URL, or an embedded server), each on a fresh database of its own.
 * Parameters: JOBS, CONCURRENCY, LATENCY_SAMPLES (env, or `npm run bench -- JOBS=2000`).
 * Progress goes to stderr, the report to stdout.
 */
import 'reflect-metadata';
import { readBenchConfig, UsageError, type BenchConfig } from './config';
import { dropDatabase, openPostgresServer, postgresVersion, recreateDatabase, type PostgresServer } from './database';
import { printReport } from './report';
import { runSuite, type QueueUnderTest, type SuiteResult, type WorkerMode } from './suite';
import { graphileWorkerVersion, openGraphileWorker } from './system-graphile-worker';
import { openNestJobQueue } from './system-nestjs-job-queue';

const OUR_DATABASE = 'bench_jq';
const THEIR_DATABASE = 'bench_gw';

const progress = (message: string) => console.error(`[bench] ${message}`);

async function main(): Promise<void> {
  const config = readBenchConfig(process.argv.slice(2), process.env);
  const server = await openPostgresServer();
  try {
    const postgres = await postgresVersion(server.url);
    // Ours first: it pays for warming up the shared pg driver, not graphile-worker.
    const ours = await benchOn(server, OUR_DATABASE, ['default'], config, openNestJobQueue);
    const theirs = await benchOn(server, THEIR_DATABASE, ['default', 'batched'], config, openGraphileWorker);
    printReport(config, { database: server.description, postgres, graphileWorkerVersion: graphileWorkerVersion() }, ours, theirs);
  } finally {
    await dropDatabase(server.url, OUR_DATABASE).catch(() => undefined);
    await dropDatabase(server.url, THEIR_DATABASE).catch(() => undefined);
    await server.stop();
  }
}

/** One system on a fresh database, closed whatever happens. */
async function benchOn(
  server: PostgresServer,
  database: string,
  modes: WorkerMode[],
  config: BenchConfig,
  open: (url: string, config: BenchConfig) => Promise<QueueUnderTest>,
): Promise<SuiteResult> {
  const queue = await open(await recreateDatabase(server.url, database), config);
  try {
    return await runSuite(queue, modes, config, progress);
  } finally {
    await queue.close();
  }
}

main().then(
  () => exitSoon(0),
  (error: unknown) => {
    console.error('[bench] failed:', error instanceof UsageError ? error.message : error);
    exitSoon(1);
  },
);

/**
 * Everything the benchmark opened is closed by now, but a library may still hold a timer
 * (as of writing, JobQueueWorker.stop() leaves its shutdownGracePeriod sleep pending): do not
 * wait for it.
 */
function exitSoon(code: number): void {
  process.exitCode = code;
  setTimeout(() => {
    console.error('[bench] a timer or handle was still pending 1 s after cleanup; exiting without it');
    process.exit(code);
  }, 1000).unref();
}
