import type { BenchConfig } from './config';
import { insertJobs, settleJobsTable } from './jobs-table';
import { LIMIT_PROCESSES, measureLimitLines, type LimitsResult } from './limits';
import { drainAcross, type ProcessDrain } from './process-drain';
import { addInChunks, type Progress } from './suite';
import { openApp } from './system-nestjs-job-queue';
import type { MemorySample } from './worker-process';
import { WorkerProcess } from './worker-process-handle';

type BenchApp = Awaited<ReturnType<typeof openApp>>;

export interface ScaleResult {
  /** Draining JOBS jobs with 1, 2, … PROCESSES worker processes (index 0: one process); empty with PROCESSES=0. */
  processes: ProcessDrain[];
  /** SCALE=1 only. */
  backlog?: BacklogResult;
  /** With PROCESSES ≥ 3: a concurrency limit and a rate limit across 3 processes (limits.ts). */
  limits?: LimitsResult;
}

/** One worker process draining JOBS jobs, then BACKLOG jobs, both loaded and settled the same way. */
export interface BacklogResult {
  jobs: ProcessDrain;
  /** Absent if the JOBS drain stalled. */
  backlog?: ProcessDrain;
  /** The worker process's memory after each drain, after a full GC (bytes). */
  memoryAfterJobs: MemorySample;
  memoryAfterBacklog?: MemorySample;
}

/** Jobs every process runs a share of before the first line: no line pays for a cold process more than another. */
const WARM_UP_JOBS = 2000;

/**
 * On a fresh database: PROCESSES worker processes (worker-process.ts), each this library in a
 * Nest application context of its own with CONCURRENCY, and the bench's own app, whose worker
 * never starts: it made the schema before the processes opened, and it adds, counts and settles.
 * The lines for 1, 2, … processes, then with SCALE=1 the backlog line on the first process.
 */
export async function runScale(url: string, config: BenchConfig, progress: Progress): Promise<ScaleResult> {
  const started = performance.now();
  const app = await openApp(url, config);
  let processes: WorkerProcess[] = [];
  try {
    processes = await openProcesses(url, config, Math.max(config.processes, config.scale ? 1 : 0));
    progress(`worker processes: warm-up, ${WARM_UP_JOBS} jobs shared by ${processes.length}`);
    await addAndDrain(app, processes, WARM_UP_JOBS, config);
    const lines = config.processes > 0 ? await measureProcessLines(app, processes, config, progress) : [];
    const limits = config.processes >= LIMIT_PROCESSES ? await measureLimitLines(app, processes, config, progress, addAndDrain) : undefined;
    progress(`worker processes: ${((performance.now() - started) / 1000).toFixed(0)} s with the warm-up and the processes' start`);
    const backlog = config.scale ? await measureBacklog(app, processes[0], config, progress) : undefined;
    return { processes: lines, backlog, limits };
  } finally {
    await Promise.all(processes.map((p) => p.close()));
    await app.close();
  }
}

/** Opened at once; if one fails, the others are closed before the error goes up. */
async function openProcesses(url: string, config: BenchConfig, count: number): Promise<WorkerProcess[]> {
  const opening = await Promise.allSettled(Array.from({ length: count }, (_, i) => WorkerProcess.open(url, config, `worker process ${i + 1}`)));
  const opened = opening.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
  const failed = opening.find((o): o is PromiseRejectedResult => o.status === 'rejected');
  if (!failed) return opened;
  await Promise.all(opened.map((p) => p.close()));
  throw failed.reason;
}

/**
 * JOBS jobs drained by the first n processes, for n = 1 … PROCESSES, each line by the steps of
 * the lifecycle drains (suite.ts): VACUUM of jobs and a CHECKPOINT, the jobs added by addMany(),
 * then the "go" to the n processes at once.
 */
async function measureProcessLines(app: BenchApp, processes: WorkerProcess[], config: BenchConfig, progress: Progress): Promise<ProcessDrain[]> {
  const lines: ProcessDrain[] = [];
  for (let n = 1; n <= config.processes; n++) {
    progress(`worker processes: drain ${config.jobs} jobs with ${n} process(es), concurrency ${config.concurrency} each`);
    lines.push(await addAndDrain(app, processes.slice(0, n), config.jobs, config));
  }
  return lines;
}

async function addAndDrain(app: BenchApp, by: WorkerProcess[], count: number, config: BenchConfig): Promise<ProcessDrain> {
  await settleJobsTable(app.dataSource);
  await addInChunks(app, count, config.chunkSize);
  const drain = await drainAcross(app, by, count);
  if (drain.stalled) throw new Error(`the drain of ${count} jobs by ${by.length} worker process(es) stalled: ${drain.stalled}`);
  return drain;
}

/**
 * One worker process drains JOBS jobs, then a backlog of BACKLOG jobs, each put in the table by
 * one insert … select from generate_series, then VACUUM ANALYZE and a CHECKPOINT (so that
 * neither drain finds the other's dead rows or an unflushed load): jobs/s of both, and the
 * process's memory after each.
 */
async function measureBacklog(app: BenchApp, worker: WorkerProcess, config: BenchConfig, progress: Progress): Promise<BacklogResult> {
  const drain = async (count: number) => {
    progress(`backlog: ${count} jobs inserted in one statement, then VACUUM ANALYZE and a CHECKPOINT`);
    const loading = performance.now();
    await insertJobs(app.dataSource, count);
    await settleJobsTable(app.dataSource, { analyze: true });
    progress(`backlog: loaded in ${((performance.now() - loading) / 1000).toFixed(1)} s; drain ${count} jobs with 1 worker process`);
    const result = await drainAcross(app, [worker], count);
    if (result.stalled) progress(`backlog: the drain of ${count} jobs stalled: ${result.stalled}`);
    // Read even from a worker still running (its completions unwritten): what it holds is the point.
    return { result, memory: await worker.memory() };
  };
  const jobs = await drain(config.jobs);
  if (jobs.result.stalled) return { jobs: jobs.result, memoryAfterJobs: jobs.memory };
  const backlog = await drain(config.backlog);
  return { jobs: jobs.result, backlog: backlog.result, memoryAfterJobs: jobs.memory, memoryAfterBacklog: backlog.memory };
}
