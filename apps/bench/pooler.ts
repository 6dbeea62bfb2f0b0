import type { JobQueueModuleOptions } from '../../libs/job-queue/src';
import { pgbouncerPath, startPgBouncer } from '../pgbouncer';
import type { BenchConfig } from './config';
import { settleJobsTable } from './jobs-table';
import { addInChunks, drainTimeoutMs, perSecond, waitUntilNoJobs, type Progress } from './suite';
import { openApp } from './system-nestjs-job-queue';

/** The three ways a worker reaches PostgreSQL in the pooler lines. */
export const POOLER_LINES = ['direct', 'directPooled', 'listenUrl', 'polling'] as const;
export type PoolerLine = (typeof POOLER_LINES)[number];

/** Jobs/s of each line in one round; absent when PgBouncer is not installed. */
export type PoolerResult = Record<PoolerLine, number>;

/** Whether the pooler lines can run here: PgBouncer installed (CI installs it), and POOLER not 0. */
export function poolerAvailable(config: BenchConfig): boolean {
  return config.pooler && pgbouncerPath() !== undefined;
}

/**
 * The drain through PgBouncer (Debian's, in transaction mode, a pool of `poolSize` server
 * connections, on a free port of its own) against the drain straight to PostgreSQL, on one
 * fresh database, in four apps open at once: `direct` (no pooler, the default options),
 * `directPooled` (no pooler, but transactionPooling: what the option itself costs, unprepared
 * statements and claims in transactions of their own), `listenUrl` (through PgBouncer with
 * transactionPooling, LISTEN on the direct URL) and `polling` (through PgBouncer with
 * transactionPooling, no listenUrl). Each drain as the
 * lifecycle drains run: VACUUM of jobs and a CHECKPOINT, JOBS jobs added by addMany(), the
 * worker started, timed to the last handler start; then every completion written.
 */
export async function runPoolerLines(url: string, config: BenchConfig, progress: Progress): Promise<PoolerResult> {
  const bouncer = await startPgBouncer(url, { defaultPoolSize: config.poolSize });
  const pooled = bouncer.through(url);
  const options: Record<PoolerLine, [string, Partial<JobQueueModuleOptions>]> = {
    direct: [url, {}],
    directPooled: [url, { transactionPooling: true, listenUrl: url }],
    listenUrl: [pooled, { transactionPooling: true, listenUrl: url }],
    polling: [pooled, { transactionPooling: true }],
  };
  const apps: Array<Awaited<ReturnType<typeof openApp>>> = [];
  try {
    // the direct one first: it migrates
    for (const line of POOLER_LINES) apps.push(await openApp(options[line][0], config, undefined, options[line][1]));
    const [direct] = apps;
    const result = {} as PoolerResult;
    for (const [i, line] of POOLER_LINES.entries()) {
      const app = apps[i];
      await settleJobsTable(direct.dataSource);
      await addInChunks(app, config.jobs, config.chunkSize);
      progress(`pooler: drain ${config.jobs} jobs, ${line.startsWith('direct') ? `straight to PostgreSQL (${line})` : `through PgBouncer (${line})`}`);
      app.probe.reset();
      const started = performance.now();
      const worker = await app.startWorker('default');
      try {
        await app.probe.untilCount(config.jobs, drainTimeoutMs(config.jobs));
        result[line] = perSecond(config.jobs, performance.now() - started);
        await waitUntilNoJobs(direct);
      } finally {
        await worker.stop();
      }
    }
    return result;
  } finally {
    for (const app of apps.reverse()) await app.close();
    await bouncer.stop();
  }
}
