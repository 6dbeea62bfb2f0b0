import {
  Injectable,
  Logger,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { Subject, type Observable } from 'rxjs';
import { TaskRegistry, type RegisteredTask } from '../decorators/task-registry';
import { JobQueueDatabase } from '../module/job-queue-database';
import { toJob, type Job, type JobRow } from '../service/job';
import { JobQueueService } from '../service/job-queue.service';
import { backoffMs, sleep } from './backoff';
import type { JobQueueEvent } from './events';
import { NotifyListener } from './notify-listener';
import { poolSizeWarning } from './pool-size';
import { PrefetchSizer } from './prefetch';
import { ReleaseBatcher } from './release-batcher';
import { defaultRetryDelayMs } from './retry-delay';
import { errorMessage, runJob, type JobOutcome } from './run-job';

interface RunningJob {
  job: Job;
  abort: AbortController;
  done: Promise<void>;
}

const HEARTBEAT_MS = 10_000;

/**
 * The worker: claims jobs of the tasks this process knows, runs up to `concurrency` of them
 * at once, and releases them in batches. It wakes on NOTIFY, polls every `pollInterval`, and
 * starts with the app (unless `worker: false`) and drains in Nest's shutdown hooks.
 *
 * Data path: wake() → fetchCycle() claims a batch (sql claimJobs) → start() runs each
 * handler (run-job.ts) → finish() hands the outcome to the ReleaseBatcher (sql releaseJobs).
 */
@Injectable()
export class JobQueueWorker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  readonly workerId = `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  private readonly logger = new Logger('JobQueueWorker');
  private readonly events = new Subject<JobQueueEvent>();
  /** Every event of this worker: jobs starting, succeeding, failing; the worker starting, stopping, erring. */
  readonly events$: Observable<JobQueueEvent> = this.events.asObservable();

  private readonly running = new Map<string, RunningJob>();
  /** Claimed (locked for this worker) but not started yet: see prefetch.ts. */
  private readonly prefetched: Job[] = [];
  private readonly prefetch: PrefetchSizer;
  private batcher: ReleaseBatcher;
  private listener?: NotifyListener;
  private pollTimer?: NodeJS.Timeout;
  private heartbeatTimer?: NodeJS.Timeout;
  private retryTimer?: NodeJS.Timeout;
  private fetchChain: Promise<number> = Promise.resolve(0);
  private wakeQueued = false;
  private claimFailures = 0;
  /** The last claim found as many candidates as it asked for: more jobs may be waiting. */
  private moreMayBeWaiting = false;
  private started = false;
  private stopping = false;

  constructor(
    private readonly db: JobQueueDatabase,
    private readonly tasks: TaskRegistry,
    private readonly jobs: JobQueueService,
  ) {
    this.prefetch = new PrefetchSizer(this.db.options.concurrency);
    this.batcher = this.createBatcher();
  }

  /** A flush that frees a named queue notifies every worker (this one too), so it needs no wake-up of its own. */
  private createBatcher(): ReleaseBatcher {
    return new ReleaseBatcher(
      (completed, failedIds, errors, delays) =>
        this.db.run<{ busy: string[] }>('releaseJobs', [this.workerId, completed, failedIds, errors, delays]).then(([row]) => row.busy),
      (error) => this.reportError('release', error),
    );
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.db.options.worker) await this.start();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.stop();
  }

  /** Jobs running in this process right now. */
  get runningCount(): number {
    return this.running.size;
  }

  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    this.stopping = false;
    await this.db.run('registerWorker', [this.workerId]);
    this.listener = new NotifyListener(
      this.db.pool,
      this.db.sql.channel,
      () => void this.wake(),
      (error) => this.reportError('listen', error),
    );
    await this.listener.start();
    this.pollTimer = setInterval(() => void this.wake(), this.db.options.pollInterval);
    this.heartbeatTimer = setInterval(() => {
      this.db.run('heartbeatWorker', [this.workerId]).catch((error) => this.reportError('heartbeat', error));
    }, HEARTBEAT_MS);
    this.logger.log(
      `Worker ${this.workerId} started: concurrency ${this.db.options.concurrency}, tasks ${this.tasks.identifiers().join(', ') || '(none)'}`,
    );
    const poolWarning = poolSizeWarning(this.db.pool.options.max, this.db.options.concurrency);
    if (poolWarning) this.logger.warn(`Worker ${this.workerId}: ${poolWarning}`);
    this.emit({ type: 'worker:start', workerId: this.workerId });
  }

  /**
   * Stops claiming, lets running jobs finish within the grace period, then aborts them and
   * gives the unfinished ones back with their attempt returned. Nothing stays locked by it.
   */
  async stop(): Promise<void> {
    // A producer-only app (worker: false) may still be running jobs through runUntilIdle().
    const busy = this.running.size > 0 || this.prefetched.length > 0;
    if (this.stopping || (!this.started && !busy)) return;
    this.stopping = true;
    clearInterval(this.pollTimer);
    clearInterval(this.heartbeatTimer);
    clearTimeout(this.retryTimer);
    await this.listener?.stop();
    await this.fetchChain;

    const finished = Promise.all([...this.running.values()].map((r) => r.done));
    const graceOver = new AbortController();
    await Promise.race([finished, sleep(this.db.options.shutdownGracePeriod, graceOver.signal)]);
    if (this.running.size > 0) {
      for (const { abort } of this.running.values()) abort.abort(new Error('The worker is shutting down'));
      // Handlers that honour the signal settle now and are released normally.
      await Promise.race([finished, sleep(Math.min(200, this.db.options.shutdownGracePeriod), graceOver.signal)]);
    }
    graceOver.abort(); // no timer left behind to keep the process alive
    await this.batcher.stop();
    this.batcher = this.createBatcher(); // for a later start() or runUntilIdle()
    this.prefetched.length = 0; // never started: given back below with the unfinished ones
    const givenBack = await this.giveBack();
    this.running.clear();
    await this.db.run('unregisterWorker', [this.workerId]).catch(() => undefined);
    this.started = false;
    if (givenBack.length > 0) this.logger.warn(`Gave back ${givenBack.length} unfinished job(s): ${givenBack.join(', ')}`);
    this.logger.log(`Worker ${this.workerId} stopped`);
    this.emit({ type: 'worker:stop', workerId: this.workerId, givenBack });
  }

  /**
   * Runs every job that is available now (including jobs those jobs add) and resolves when
   * none is left and every result is written. For tests and one-off scripts; works with
   * `worker: false` too.
   */
  async runUntilIdle(): Promise<void> {
    while (!this.stopping) {
      // Idle only if a claim that began with nothing running, prefetched or unwritten finds
      // nothing: a result written during the claim may have freed a named queue it skipped.
      const settledBefore = this.running.size === 0 && this.prefetched.length === 0 && this.batcher.idle;
      const claimed = await this.wake();
      if (this.running.size > 0) {
        await Promise.race([...this.running.values()].map((r) => r.done));
      } else if (!this.batcher.idle) {
        await this.batcher.flush();
      } else if (settledBefore && claimed === 0) {
        return;
      }
    }
  }

  /** Asks for a fetch; wake-ups that arrive while one is queued share it. */
  private wake(): Promise<number> {
    if (this.wakeQueued) return this.fetchChain;
    this.wakeQueued = true;
    this.fetchChain = this.fetchChain.then(() => {
      this.wakeQueued = false;
      return this.fetchCycle();
    });
    return this.fetchChain;
  }

  /**
   * Claims jobs until the free slots and the prefetch room are full, or until the table has
   * nothing more for us. Returns how many it claimed.
   */
  private async fetchCycle(): Promise<number> {
    const identifiers = this.tasks.identifiers();
    let total = 0;
    while (!this.stopping && identifiers.length > 0) {
      const room = this.db.options.concurrency - this.running.size + this.prefetch.target - this.prefetched.length;
      if (room <= 0) break;
      let rows: Array<JobRow & { candidate_count: number }>;
      try {
        const forbidden = await this.forbiddenFlags();
        rows = await this.db.run('claimJobs', [identifiers, forbidden, room, this.workerId]);
        this.claimFailures = 0;
      } catch (error) {
        this.claimFailures += 1;
        this.reportError('claim', error);
        clearTimeout(this.retryTimer);
        this.retryTimer = setTimeout(() => void this.wake(), backoffMs(this.claimFailures));
        break;
      }
      if (this.stopping) {
        // Claimed while stop() began: these are given back by stop().
        break;
      }
      for (const row of rows) this.prefetched.push(toJob(row));
      this.startPrefetched();
      total += rows.length;
      // Fewer candidates than asked for: the table has nothing more for us right now.
      this.moreMayBeWaiting = rows.length > 0 && rows[0].candidate_count >= room;
      if (!this.moreMayBeWaiting) break;
    }
    return total;
  }

  private async forbiddenFlags(): Promise<string[]> {
    const option = this.db.options.forbiddenFlags;
    if (!option) return [];
    return typeof option === 'function' ? await option() : option;
  }

  /** Starts prefetched jobs while slots are free, in the order they were claimed. */
  private startPrefetched(): void {
    while (this.running.size < this.db.options.concurrency && this.prefetched.length > 0 && !this.stopping) {
      this.launch(this.prefetched.shift()!);
    }
  }

  private launch(job: Job): void {
    const task = this.tasks.get(job.taskIdentifier)!;
    const abort = new AbortController();
    const startedAt = performance.now();
    const entry: RunningJob = { job, abort, done: Promise.resolve() };
    this.emit({ type: 'job:start', job });
    entry.done = runJob(task, job, abort.signal, (identifier, payload, spec) => this.jobs.add(identifier, payload, spec)).then(
      (outcome) => {
        // Given back at shutdown (and perhaps claimed again since): no longer this run's to release.
        if (this.running.get(job.id) !== entry) return;
        this.running.delete(job.id);
        try {
          this.settle(task, entry, outcome, performance.now() - startedAt);
        } finally {
          // Hand the free slot on in this same step, so that no one (runUntilIdle) sees it empty
          // while prefetched jobs wait; claim ahead if the last claim left jobs behind
          // (otherwise NOTIFY or the poll will wake us).
          this.startPrefetched();
          if (this.moreMayBeWaiting && this.prefetched.length <= this.prefetch.target / 2) void this.wake();
        }
      },
    );
    this.running.set(job.id, entry);
  }

  /** Hands a finished run's outcome to the release batcher and reports it. */
  private settle(task: RegisteredTask, { job, abort }: RunningJob, outcome: JobOutcome, durationMs: number): void {
    this.prefetch.record(durationMs);
    if (outcome.ok) {
      this.batcher.complete(job.id);
      this.emit({ type: 'job:success', job, result: outcome.result, durationMs });
      this.emit({ type: 'job:complete', job });
      return;
    }
    const { error } = outcome;
    // Aborted by shutdown: not the job's fault; stop() gives it back with the attempt returned.
    if (this.stopping && abort.signal.aborted) return;
    const message = errorMessage(error);
    const delayMs = this.retryDelay(task.options.retryDelay, job.attempts, error);
    this.batcher.fail(job.id, message, delayMs);
    if (job.attempts >= job.maxAttempts) {
      this.logger.error(`Job ${job.id} (${job.taskIdentifier}) failed for good after ${job.attempts} attempt(s): ${message}`);
      this.emit({ type: 'job:failed', job, error, durationMs });
    } else {
      const retryAt = new Date(Date.now() + delayMs);
      this.logger.warn(
        `Job ${job.id} (${job.taskIdentifier}) failed attempt ${job.attempts}/${job.maxAttempts}, retrying at ${retryAt.toISOString()}: ${message}`,
      );
      this.emit({ type: 'job:error', job, error, retryAt, durationMs });
    }
    this.emit({ type: 'job:complete', job, error });
  }

  private retryDelay(custom: ((attempts: number, error: unknown) => number) | undefined, attempts: number, error: unknown): number {
    if (!custom) return defaultRetryDelayMs(attempts);
    try {
      const ms = custom(attempts, error);
      return Number.isFinite(ms) && ms >= 0 ? ms : defaultRetryDelayMs(attempts);
    } catch {
      return defaultRetryDelayMs(attempts);
    }
  }

  private async giveBack(): Promise<string[]> {
    for (let attempt = 1; attempt <= 5; attempt++) {
      try {
        const rows = await this.db.run<{ id: string }>('giveBackJobs', [this.workerId]);
        return rows.map((row) => String(row.id));
      } catch (error) {
        this.reportError('give-back', error);
        await sleep(backoffMs(attempt));
      }
    }
    return [];
  }

  /** Logs a failed query or connection (the caller retries) and emits it as a worker:error event; the cron scheduler reports through it too. */
  reportError(during: Extract<JobQueueEvent, { type: 'worker:error' }>['during'], error: unknown): void {
    this.logger.warn(`${during} failed, retrying: ${errorMessage(error)}`);
    this.emit({ type: 'worker:error', workerId: this.workerId, during, error });
  }

  /** Also used by the cron scheduler, so that its events join the same stream. */
  emit(event: JobQueueEvent): void {
    this.events.next(event);
  }
}
