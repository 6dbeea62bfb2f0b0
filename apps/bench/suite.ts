import { randomInt } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchConfig } from './config';
import type { HandlerProbe } from './handler-probe';

/** `default`: each system as it ships. `batched`: graphile-worker's local queue and batched completions. */
export type WorkerMode = 'default' | 'batched';

/** What the measurements need from a job queue; one adapter per system. */
export interface QueueUnderTest {
  readonly name: string;
  readonly probe: HandlerProbe;
  /** One job added alone; with `at` (the wall clock, epoch ms) in its payload for the sustained lines. */
  addOne(index: number, at?: number): Promise<unknown>;
  addMany(fromIndex: number, count: number): Promise<unknown>;
  countJobs(): Promise<number>;
  startWorker(mode: WorkerMode): Promise<{ stop(): Promise<void> }>;
  /** nestjs-job-queue only: turns localStart on or off for the running worker (on by default). */
  setLocalStart?(on: boolean): void;
  close(): Promise<void>;
  /** nestjs-job-queue only: what the job lifecycle's drains need (runLifecycleDrains). */
  readonly lifecycle?: LifecycleHooks;
}

export interface LifecycleHooks {
  /** The same queue on the same database in a second app whose retention.completed is 0 (completed jobs deleted at release); the caller closes it. */
  openWithoutHistory(): Promise<QueueUnderTest>;
  /** Puts `rows` completed jobs in finished_jobs, in one statement, and vacuums and analyzes it. */
  addHistory(rows: number): Promise<void>;
  /** Vacuums the jobs table and takes a CHECKPOINT (where allowed): every lifecycle drain starts from the same state. */
  settleTables(): Promise<void>;
  /** Subscribes to every cluster-wide queue event (queueEvents$); resolves once the workers publish them, with a function that unsubscribes and says how many were heard. */
  listenToQueueEvents(): Promise<() => number>;
}

export interface Latency {
  p50: number;
  p99: number;
}

/** add() one at a time and addMany() are not here: the systems' are measured interleaved (adds-interleaved.ts). */
export interface SuiteResult {
  drainPerSecond: Partial<Record<WorkerMode, number>>;
  latencyMs: Partial<Record<WorkerMode, Latency>>;
  /**
   * nestjs-job-queue only: latency with localStart off, every job through NOTIFY and a claim:
   * what a job added in another process (a producer-only replica) waits.
   */
  claimedLatencyMs?: Latency;
  /** nestjs-job-queue only: the drains beside drainPerSecond.default, which has the default retention. */
  lifecycle?: LifecycleResult;
}

export interface LifecycleResult {
  /** Drain with the default retention, by the same steps as the two others (jobs/s). */
  defaultPerSecond: number;
  /** Drain with retention { completed: 0 }: completed jobs deleted at release, no history written (jobs/s). */
  withoutHistoryPerSecond: number;
  /** Drain with the default retention, `history` completed jobs already in finished_jobs (jobs/s); absent with HISTORY=0. */
  withHistoryPerSecond?: number;
  /** Drain with the default retention while one subscriber hears every queue event (jobs/s). */
  withListenerPerSecond: number;
  /** How many events that subscriber heard in that drain. */
  eventsHeard: number;
}

export type Progress = (message: string) => void;

/**
 * The drain lines for one system, each mode on JOBS jobs added by addMany() just before, the
 * worker left idle by a drain being the one whose latency is measured. Then, for
 * nestjs-job-queue, the job lifecycle's drains.
 */
export async function runSuite(queue: QueueUnderTest, modes: WorkerMode[], config: BenchConfig, progress: Progress): Promise<SuiteResult> {
  const result: SuiteResult = { drainPerSecond: {}, latencyMs: {} };

  for (const mode of modes) {
    await addInChunks(queue, config.jobs, config.chunkSize); // each mode drains its own JOBS jobs
    progress(`${queue.name}: drain ${config.jobs} jobs (${mode} mode)`);
    const { perSecond, worker } = await measureDrain(queue, mode, config.jobs);
    result.drainPerSecond[mode] = perSecond;
    try {
      // Every completion written and the worker idle before latency is measured.
      await waitUntilNoJobs(queue);
      progress(`${queue.name}: latency, ${config.latencySamples} samples (${mode} mode)`);
      result.latencyMs[mode] = await measureLatency(queue, config.latencySamples);
      if (queue.setLocalStart) {
        progress(`${queue.name}: latency with localStart off, ${config.latencySamples} samples`);
        queue.setLocalStart(false);
        result.claimedLatencyMs = await measureLatency(queue, config.latencySamples);
        queue.setLocalStart(true);
      }
    } finally {
      await worker.stop();
    }
  }
  if (queue.lifecycle) result.lifecycle = await runLifecycleDrains(queue, queue.lifecycle, config, progress);
  return result;
}

/**
 * The job lifecycle's cost, by three drains run the same way, one after the other: the
 * jobs table vacuumed and a CHECKPOINT taken (so that no drain pays for another's dead rows
 * or for the full-page writes after a checkpoint more than the others), JOBS jobs added,
 * then drained. 1: the default retention; 2: retention.completed 0 (a second app on the
 * same database); 3: unless HISTORY=0, the default retention again with HISTORY completed
 * jobs already in finished_jobs. No latency here: it does not depend on the history.
 */
async function runLifecycleDrains(queue: QueueUnderTest, hooks: LifecycleHooks, config: BenchConfig, progress: Progress): Promise<LifecycleResult> {
  const drain = async (on: QueueUnderTest, label: string) => {
    await hooks.settleTables();
    await addInChunks(on, config.jobs, config.chunkSize);
    progress(`${queue.name}: drain ${config.jobs} jobs (${label})`);
    return drainAndStop(on, config.jobs);
  };
  const defaultPerSecond = await drain(queue, 'default retention');
  const stopListening = await hooks.listenToQueueEvents();
  let withListenerPerSecond: number;
  let eventsHeard: number;
  try {
    withListenerPerSecond = await drain(queue, 'default retention, one subscriber to every queue event');
  } finally {
    eventsHeard = stopListening();
  }
  const withoutHistory = await hooks.openWithoutHistory();
  let withoutHistoryPerSecond: number;
  try {
    withoutHistoryPerSecond = await drain(withoutHistory, 'retention { completed: 0 }');
  } finally {
    await withoutHistory.close();
  }
  if (config.history === 0) return { defaultPerSecond, withoutHistoryPerSecond, withListenerPerSecond, eventsHeard };

  progress(`${queue.name}: ${config.history} completed jobs into finished_jobs, then VACUUM ANALYZE`);
  const loading = performance.now();
  await hooks.addHistory(config.history);
  progress(`${queue.name}: history loaded in ${((performance.now() - loading) / 1000).toFixed(1)} s`);
  const withHistoryPerSecond = await drain(queue, `default retention, ${config.history} completed jobs kept`);
  return { defaultPerSecond, withoutHistoryPerSecond, withHistoryPerSecond, withListenerPerSecond, eventsHeard };
}

/** A drain whose worker is stopped once every completion is written: jobs/s. */
async function drainAndStop(queue: QueueUnderTest, count: number): Promise<number> {
  const { perSecond, worker } = await measureDrain(queue, 'default', count);
  try {
    await waitUntilNoJobs(queue);
  } finally {
    await worker.stop();
  }
  return perSecond;
}

export async function addInChunks(queue: QueueUnderTest, count: number, chunkSize: number): Promise<void> {
  for (let from = 0; from < count; from += chunkSize) await queue.addMany(from, Math.min(chunkSize, count - from));
}

/**
 * With `count` jobs queued, from starting the worker until `count` handlers have run
 * (handlers do nothing, so started is finished): jobs/s. The worker is left running.
 */
async function measureDrain(queue: QueueUnderTest, mode: WorkerMode, count: number) {
  queue.probe.reset();
  const started = performance.now();
  const worker = await queue.startWorker(mode);
  try {
    await queue.probe.untilCount(count, drainTimeoutMs(count));
  } catch (error) {
    await worker.stop();
    throw error;
  }
  return { perSecond: perSecond(count, performance.now() - started), worker };
}

/**
 * With an idle running worker, one job at a time: from just before add() to its handler
 * starting. The next job is added only once the previous one started, after a small random
 * gap so that adds do not line up with the workers' timers.
 */
async function measureLatency(queue: QueueUnderTest, samples: number): Promise<Latency> {
  const latencies: number[] = [];
  for (let i = 0; i < samples; i++) {
    await sleep(randomInt(2, 11));
    const handlerStart = queue.probe.nextStart(10_000);
    handlerStart.catch(() => undefined); // awaited below; this only keeps a failed add() from leaving it unhandled
    const beforeAdd = performance.now();
    try {
      await queue.addOne(i);
    } catch (error) {
      queue.probe.reset();
      throw error;
    }
    latencies.push((await handlerStart) - beforeAdd);
  }
  latencies.sort((a, b) => a - b);
  return { p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

export async function waitUntilNoJobs(queue: QueueUnderTest, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = await queue.countJobs();
    if (left === 0) return;
    if (Date.now() > deadline) throw new Error(`${queue.name}: ${left} job(s) still in the table ${timeoutMs} ms after the drain`);
    await sleep(20);
  }
}

/** Nearest-rank percentile of sorted values. */
export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export function perSecond(count: number, ms: number): number {
  return (count * 1000) / ms;
}

/** How long a drain of `count` jobs may take before the bench gives up on it. */
export function drainTimeoutMs(count: number): number {
  return 60_000 + count * 10;
}
