import type { BenchConfig } from './config';
import { TASK } from './jobs-table';
import type { ProcessDrain } from './process-drain';
import type { Progress } from './suite';
import type { openApp } from './system-nestjs-job-queue';
import type { WorkerProcess } from './worker-process-handle';

type BenchApp = Awaited<ReturnType<typeof openApp>>;
type AddAndDrain = (app: BenchApp, by: WorkerProcess[], count: number, config: BenchConfig) => Promise<ProcessDrain>;

/** The limit lines need this many worker processes (PROCESSES). */
export const LIMIT_PROCESSES = 3;
/** The concurrency limit of its line: one unlimited worker's default concurrency, across the processes. */
export const LIMITED_CONCURRENCY = 10;
/** The rate of its line: RATE_MAX starts a second. */
export const RATE_MAX = 1000;
const RATE_PER_MS = 1000;

/** The rate limit's line: how it held, and how much of it the drain used. */
export interface RateLine {
  /** The most starts in any closed window of RATE_PER_MS, by the jobs' started_at: never above RATE_MAX. */
  mostInWindow: number;
  /** RATE_JOBS starts need (RATE_JOBS / RATE_MAX − 1) whole windows after the first: that span against the one taken, in percent. */
  usedPercent: number;
}

export interface LimitsResult {
  /** JOBS jobs with `globalConcurrency: LIMITED_CONCURRENCY`, by LIMIT_PROCESSES processes (against the scale lines' one unlimited process). */
  concurrency: ProcessDrain;
  rate: RateLine;
}

/**
 * The limits' lines (issue 27), on the scale lines' processes and database, the bench's task
 * limited by setTaskLimits (the workers read it as their start, at the "go"): JOBS jobs with
 * `globalConcurrency: 10` across LIMIT_PROCESSES processes, then RATE_JOBS jobs at RATE_MAX a
 * second; the limits reset after.
 */
export async function measureLimitLines(app: BenchApp, processes: WorkerProcess[], config: BenchConfig, progress: Progress, addAndDrain: AddAndDrain): Promise<LimitsResult> {
  const by = processes.slice(0, LIMIT_PROCESSES);
  try {
    await app.jobs.setTaskLimits(TASK, { globalConcurrency: LIMITED_CONCURRENCY });
    progress(`limits: drain ${config.jobs} jobs with globalConcurrency ${LIMITED_CONCURRENCY} across ${by.length} processes`);
    const concurrency = await addAndDrain(app, by, config.jobs, config);
    await app.jobs.setTaskLimits(TASK, { globalConcurrency: null, rateLimit: { max: RATE_MAX, per: RATE_PER_MS } });
    const count = rateJobs(config);
    progress(`limits: drain ${count} jobs with a rate limit of ${RATE_MAX} a second across ${by.length} processes`);
    const [{ since }] = await app.dataSource.query<Array<{ since: Date }>>('select clock_timestamp() as since');
    await addAndDrain(app, by, count, config);
    return { concurrency, rate: await rateHeld(app, since, count) };
  } finally {
    await app.jobs.resetTaskLimits(TASK);
  }
}

/** The rate line's jobs: ten seconds' worth at the limit, fewer on a short run. */
export function rateJobs(config: BenchConfig): number {
  return Math.min(config.jobs, 10 * RATE_MAX);
}

async function rateHeld(app: BenchApp, since: Date, count: number): Promise<RateLine> {
  const [row] = await app.dataSource.query<Array<{ most: number; span_ms: number }>>(
    `with s as (select started_at from job_queue.finished_jobs where task_identifier = $1 and started_at >= $2)
     select (select max((select count(*) from s o where o.started_at between w.started_at and w.started_at + $3 * interval '1 millisecond')) from s w)::int as most,
       (extract(epoch from max(started_at) - min(started_at)) * 1000)::float8 as span_ms from s`,
    [TASK, since, RATE_PER_MS],
  );
  return { mostInWindow: row.most, usedPercent: (100 * (count / RATE_MAX - 1) * RATE_PER_MS) / row.span_ms };
}
