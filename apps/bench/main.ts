/**
 * `npm run bench`: this library's worker against graphile-worker and against its own SQL run
 * by plain node-pg clients, on the same PostgreSQL with fsync on (DATABASE_URL, or an embedded
 * server started durable), each on a fresh database of its own, for ROUNDS rounds in turn:
 * first the systems' add() one at a time and addMany(), interleaved (adds-interleaved.ts), then
 * each system's other lines; this library's drain with and without a history of completed
 * jobs (suite.ts), and its flows against plain jobs (flows.ts); and its scale lines: several worker processes, and with SCALE=1 a big
 * backlog (scale.ts); and where PgBouncer is installed, its drain through PgBouncer in transaction
 * mode, with and without listenUrl, against the direct drain (pooler.ts); and with SUSTAINED=1,
 * the sustained lines, producers and workers in processes of their own at fixed offered rates
 * (sustained.ts; also alone: `npm run bench:sustained`).
 * Parameters: JOBS, CONCURRENCY, LATENCY_SAMPLES, ROUNDS, HISTORY, PROCESSES, SCALE, BACKLOG, POOLER,
 * SUSTAINED, SUSTAINED_S, SUSTAINED_STEPS
 * (env, or `npm run bench -- JOBS=2000 --scale`). Progress goes to stderr, the report to stdout.
 */
import 'reflect-metadata';
import { measureAddsInterleaved } from './adds-interleaved';
import { readBenchConfig, UsageError, type BenchConfig } from './config';
import { dropDatabase, openPostgresServer, readServerSettings, recreateDatabase, type PostgresServer, type ServerSettings } from './database';
import { printReport, type RoundResult } from './report';
import { runFlowLines } from './flows';
import { poolerAvailable, runPoolerLines } from './pooler';
import { runScale } from './scale';
import { runSqlLimit } from './sql-limit';
import { runSustained } from './sustained';
import { SUSTAINED_PLOT, writeSustainedPlot } from './sustained-plot';
import { printSustained } from './report-sustained';
import { runSuite, type Progress, type QueueUnderTest, type SuiteResult, type WorkerMode } from './suite';
import { graphileWorkerVersion, openGraphileWorker } from './system-graphile-worker';
import { openNestJobQueue } from './system-nestjs-job-queue';

const OUR_DATABASE = 'bench_jq';
const THEIR_DATABASE = 'bench_gw';
const SQL_DATABASE = 'bench_sql';
const MESSAGE_DATABASE = 'bench_sql_message';
const SCALE_DATABASE = 'bench_scale';
const FLOW_DATABASE = 'bench_flows';
const POOLER_DATABASE = 'bench_pooler';
const SUSTAINED_DATABASE = 'bench_sustained';

const progress = (message: string) => console.error(`[bench] ${message}`);

async function main(): Promise<void> {
  const config = readBenchConfig(process.argv.slice(2), process.env);
  const server = await openPostgresServer();
  try {
    const settings = await readServerSettings(server.url);
    checkDurable(server, settings);
    progress(`${server.description}: fsync=${settings.fsync}, synchronous_commit=${settings.synchronousCommit}`);
    const pooler = poolerAvailable(config);
    if (config.pooler && !pooler) progress('PgBouncer is not installed (apt-get install pgbouncer, or PGBOUNCER_PATH): the pooler lines are skipped');
    const rounds: RoundResult[] = [];
    for (let round = 1; round <= config.rounds; round++) {
      const started = performance.now();
      const step: Progress = (message) => progress(`round ${round}/${config.rounds}: ${message}`);
      const adds = await measureAddsInterleaved(server.url, { ours: OUR_DATABASE, theirs: THEIR_DATABASE, raw: SQL_DATABASE, message: MESSAGE_DATABASE }, config, step);
      // Ours first of the suites in each round: in the first it pays for warming up the shared pg driver.
      const ours = await benchOn(server, OUR_DATABASE, ['default'], config, openNestJobQueue, step);
      const flows = await runFlowLines(await recreateDatabase(server.url, FLOW_DATABASE), config, step);
      const theirs = await benchOn(server, THEIR_DATABASE, ['default', 'batched'], config, openGraphileWorker, step);
      const sqlLimit = await runSqlLimit(await recreateDatabase(server.url, SQL_DATABASE), config, step);
      const scale = config.processes > 0 || config.scale ? await runScale(await recreateDatabase(server.url, SCALE_DATABASE), config, step) : undefined;
      const pooled = pooler ? await runPoolerLines(await recreateDatabase(server.url, POOLER_DATABASE), config, step) : undefined;
      const sustained = config.sustained ? await runSustained(server.url, SUSTAINED_DATABASE, config, step) : undefined;
      rounds.push({ adds, ours, flows, theirs, sqlLimit, scale, pooler: pooled, sustained });
      progress(`round ${round}/${config.rounds} took ${((performance.now() - started) / 1000).toFixed(0)} s`);
    }
    printReport(config, { server: server.description, settings, graphileWorkerVersion: graphileWorkerVersion() }, rounds);
    const sustained = rounds.flatMap((r) => (r.sustained ? [r.sustained] : []));
    if (sustained.length > 0) {
      console.log('');
      printSustained(sustained);
      writeSustainedPlot(sustained[sustained.length - 1], config.sustainedSeconds, SUSTAINED_PLOT);
      progress(`the last round's sustained lines are plotted in ${SUSTAINED_PLOT}`);
    }
  } finally {
    for (const database of [OUR_DATABASE, THEIR_DATABASE, SQL_DATABASE, MESSAGE_DATABASE, SCALE_DATABASE, FLOW_DATABASE, POOLER_DATABASE, SUSTAINED_DATABASE]) await dropDatabase(server.url, database).catch(() => undefined);
    await server.stop();
  }
}

/** Numbers from a server that does not flush its commits to disk are not what production sees: refused. */
function checkDurable(server: PostgresServer, settings: ServerSettings): void {
  if (settings.fsync !== 'on') {
    throw new UsageError(`fsync is ${settings.fsync} on ${server.description}: the benchmark needs fsync on (set DATABASE_URL to such a server, or unset it)`);
  }
  if (settings.synchronousCommit === 'off') {
    progress('WARNING: synchronous_commit is off on this server: commits do not wait for the disk, so adds will look faster than in production');
  }
}

/** One system on a fresh database, closed whatever happens. */
async function benchOn(
  server: PostgresServer,
  database: string,
  modes: WorkerMode[],
  config: BenchConfig,
  open: (url: string, config: BenchConfig) => Promise<QueueUnderTest>,
  step: Progress,
): Promise<SuiteResult> {
  const queue = await open(await recreateDatabase(server.url, database), config);
  try {
    return await runSuite(queue, modes, config, step);
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
