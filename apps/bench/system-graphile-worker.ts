import { Logger, makeWorkerUtils, run, type RunnerOptions } from 'graphile-worker';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Pool } from 'pg';
import type { BenchConfig } from './config';
import { HandlerProbe } from './handler-probe';
import { TASK } from './jobs-table';
import type { QueueUnderTest, WorkerMode } from './suite';

/** graphile-worker on its own database: WorkerUtils for adding, a `run()` runner per drain. */
export async function openGraphileWorker(url: string, config: BenchConfig): Promise<QueueUnderTest> {
  const probe = new HandlerProbe();
  const logger = quietLogger();
  const utilsPool = benchPool(url, config.poolSize, logger);
  const utils = await makeWorkerUtils({ pgPool: utilsPool, logger });
  await utils.migrate();

  const runnerOptions = (mode: WorkerMode, pgPool: Pool): RunnerOptions => ({
    pgPool,
    concurrency: config.concurrency,
    pollInterval: config.pollInterval,
    logger,
    noHandleSignals: true,
    crontab: '', // no crontab file lookup
    taskList: { [TASK]: (payload) => probe.hit((payload as { at?: number }).at) },
    preset:
      mode === 'batched'
        ? { worker: { localQueue: { size: config.localQueueSize }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } }
        : undefined,
  });

  return {
    name: 'graphile-worker',
    probe,
    addOne: (index, at) => utils.addJob(TASK, at === undefined ? { index } : { index, at }),
    addMany: (from, count) => utils.addJobs(Array.from({ length: count }, (_, k) => ({ identifier: TASK, payload: { index: from + k } }))),
    countJobs: async () => (await utilsPool.query<{ count: number }>('select count(*)::int as count from graphile_worker._private_jobs')).rows[0].count,
    startWorker: async (mode) => {
      const pool = benchPool(url, config.poolSize, logger);
      const runner = await run(runnerOptions(mode, pool)).catch(async (error: unknown) => {
        await pool.end();
        throw error;
      });
      return {
        stop: async () => {
          await runner.stop();
          await pool.end();
        },
      };
    },
    close: async () => {
      await utils.release();
      await utilsPool.end();
    },
  };
}

/**
 * A pool the benchmark owns, with the error handlers graphile-worker asks for. With a pool
 * of its own, graphile-worker's release() starts pool.end() without awaiting it and drops
 * the error handlers first, so dropping the database right after could crash the process on
 * an 'error' event; ending our own pool is awaited.
 */
function benchPool(url: string, max: number, logger: Logger): Pool {
  const pool = new Pool({ connectionString: url, max });
  pool.on('error', (error) => logger.error(`idle client: ${error.message}`));
  pool.on('connect', (client) => client.on('error', (error) => logger.error(`client: ${error.message}`)));
  return pool;
}

/** Errors only, on stderr: the benchmark's output stays the table. */
function quietLogger(): Logger {
  return new Logger(() => (level, message) => {
    if (level === 'error') console.error(`graphile-worker: ${message}`);
  });
}

/** The installed version (its package.json is not in its `exports`, so it is read from disk). */
export function graphileWorkerVersion(): string {
  const packageJson = join(dirname(require.resolve('graphile-worker')), '..', 'package.json');
  return (JSON.parse(readFileSync(packageJson, 'utf8')) as { version: string }).version;
}
