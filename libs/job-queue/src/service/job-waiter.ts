import { Inject, Injectable, type BeforeApplicationShutdown } from '@nestjs/common';
import { JobQueueError, type JobQueueErrorCode } from '../core/errors';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { JobQueueDatabase } from '../db/job-queue-database';
import { NotifyListener } from '../db/notify-listener';
import type { Job } from '../core/job';
import { readJobs } from './read-jobs';

/** A waitForJob() that ended without a result: JQ_JOB_FAILED or JQ_JOB_CANCELLED, with the job as it ended. */
export class JobEndedError extends JobQueueError {
  constructor(
    code: Extract<JobQueueErrorCode, 'JQ_JOB_FAILED' | 'JQ_JOB_CANCELLED'>,
    detail: string,
    readonly job: Job,
  ) {
    super(code, detail);
  }
}

interface Waiter {
  resolve: (job: Job) => void;
  reject: (error: Error) => void;
  timer?: NodeJS.Timeout;
}

/** What a read of waitUntil() says: settled with a value or an error, or not yet (undefined). */
export type WaitRead<T> = { value: T } | { error: Error } | undefined;

/** A waitUntil(): its read, and how to settle it. */
interface ReadWaiter {
  read: () => Promise<WaitRead<unknown>>;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer?: NodeJS.Timeout;
}

/** After a read failed, how long until the waited jobs are read again. */
const RETRY_READ_MS = 1_000;

/**
 * waitForJob(): one LISTEN connection per process, on the channel that releases tell the ids
 * of the jobs they finished (one NOTIFY per release batch). A waiter is registered and the
 * connection listening before its job is read, so an end between the two is not missed; after
 * that, a job is read again only when a notification names it (or, after a reconnect, when
 * anything may have been missed): a thousand waiters cost no polling. Works in a producer-only
 * app (`worker: false`): the connection is opened at the first wait.
 *
 * Through a transaction-mode pooler without listenUrl (no LISTEN there) it polls instead:
 * every pollInterval, while anything is waited for, every waited job is read in one
 * statement and every waitUntil() read again, as after a reconnect.
 */
@Injectable()
export class JobWaiter implements BeforeApplicationShutdown {
  private readonly waiters = new Map<string, Set<Waiter>>();
  /** waitUntil()'s waiters, by the id whose notification makes them read again (waitForFlow: the flow's). */
  private readonly readers = new Map<string, Set<ReadWaiter>>();
  private listener?: NotifyListener;
  private listening?: Promise<void>;
  private retryTimer?: NodeJS.Timeout;
  /** Polling instead of LISTEN (transactionPooling without listenUrl). */
  private pollTimer?: NodeJS.Timeout;
  /** A poll's reads are under way: the next tick waits for them. */
  private pollReading = false;
  private closed = false;

  constructor(
    private readonly db: JobQueueDatabase,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
  ) {}

  /** Resolves with the job once completed; rejects once it failed for good or was cancelled, or after `timeoutMs`. */
  async wait(id: string, timeoutMs?: number): Promise<Job> {
    if (this.closed) throw new JobQueueError('JQ_WAIT_TIMEOUT', `job ${id}: the app is shutting down`);
    await this.listen();
    // The app may have begun shutting down while the connection opened: nothing would settle this wait then.
    if (this.closed) throw new JobQueueError('JQ_WAIT_TIMEOUT', `job ${id}: the app is shutting down`);
    return new Promise<Job>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject };
      if (timeoutMs !== undefined) {
        waiter.timer = setTimeout(() => {
          this.remove(id, waiter);
          reject(new JobQueueError('JQ_WAIT_TIMEOUT', `job ${id} did not finish within ${timeoutMs} ms`));
        }, timeoutMs);
      }
      const forId = this.waiters.get(id) ?? new Set<Waiter>();
      forId.add(waiter);
      this.waiters.set(id, forId);
      void this.check([id]);
    });
  }

  /**
   * Resolves with what `read` settles on: it is read once listening, then again whenever the
   * finished channel names `id` (finish_flows() names a flow when it ends) or anything may
   * have been missed (a reconnect). Rejects with JQ_WAIT_TIMEOUT (`what` names it) after `timeoutMs`.
   */
  async waitUntil<T>(id: string, what: string, read: () => Promise<WaitRead<T>>, timeoutMs?: number): Promise<T> {
    if (this.closed) throw new JobQueueError('JQ_WAIT_TIMEOUT', `${what}: the app is shutting down`);
    await this.listen();
    if (this.closed) throw new JobQueueError('JQ_WAIT_TIMEOUT', `${what}: the app is shutting down`);
    return new Promise<T>((resolve, reject) => {
      const waiter: ReadWaiter = { read, resolve: resolve as (value: unknown) => void, reject };
      const forId = this.readers.get(id) ?? new Set<ReadWaiter>();
      if (timeoutMs !== undefined) {
        waiter.timer = setTimeout(() => {
          forId.delete(waiter);
          if (forId.size === 0) this.readers.delete(id);
          reject(new JobQueueError('JQ_WAIT_TIMEOUT', `${what} did not finish within ${timeoutMs} ms`));
        }, timeoutMs);
      }
      forId.add(waiter);
      this.readers.set(id, forId);
      void this.reread(id, waiter);
    });
  }

  /** Reads one waitUntil() again; settles it if its read did. A failed read is tried again later. */
  private async reread(id: string, waiter: ReadWaiter): Promise<void> {
    let outcome: WaitRead<unknown>;
    try {
      outcome = await waiter.read();
    } catch {
      if (this.closed) return;
      setTimeout(() => this.readers.get(id)?.has(waiter) && void this.reread(id, waiter), RETRY_READ_MS).unref();
      return;
    }
    const forId = this.readers.get(id);
    if (outcome === undefined || !forId?.has(waiter)) return;
    forId.delete(waiter);
    if (forId.size === 0) this.readers.delete(id);
    clearTimeout(waiter.timer);
    if ('error' in outcome) waiter.reject(outcome.error);
    else waiter.resolve(outcome.value);
  }

  /** How many jobs are being waited for (for tests and health checks). */
  get waitedJobs(): number {
    return this.waiters.size;
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.pollTimer);
    for (const [id, forId] of this.waiters) {
      for (const waiter of forId) {
        clearTimeout(waiter.timer);
        waiter.reject(new JobQueueError('JQ_WAIT_TIMEOUT', `job ${id}: the app shut down while waiting for it`));
      }
    }
    this.waiters.clear();
    for (const [id, forId] of this.readers) {
      for (const waiter of forId) {
        clearTimeout(waiter.timer);
        waiter.reject(new JobQueueError('JQ_WAIT_TIMEOUT', `${id}: the app shut down while waiting for it`));
      }
    }
    this.readers.clear();
    await this.listening?.catch(() => undefined);
    await this.listener?.stop();
  }

  private listen(): Promise<void> {
    this.listening ??= (async () => {
      const pool = this.db.listenPool;
      if (!pool) {
        this.pollTimer = setInterval(() => void this.poll(), this.options.pollInterval);
        return;
      }
      this.listener = new NotifyListener(
        pool,
        [this.db.sql.finishedChannel],
        (channel, payload) => this.heard(channel, payload),
        () => undefined, // it reconnects by itself, and reads every waited job again when it has
        `nestjs-job-queue waiter ${process.pid}`,
      );
      await this.listener.start();
    })();
    return this.listening;
  }

  /** A release named finished ids ('*': too many to name); no channel: (re)connected. */
  private heard(channel: string | undefined, payload: string | undefined): void {
    if (this.readers.size > 0) {
      const all = channel === undefined || payload === '*' || !payload;
      for (const id of all ? [...this.readers.keys()] : payload.split(',').filter((named) => this.readers.has(named))) {
        for (const waiter of this.readers.get(id) ?? []) void this.reread(id, waiter);
      }
    }
    if (this.waiters.size === 0) return;
    if (channel === undefined || payload === '*' || !payload) {
      void this.check([...this.waiters.keys()]);
      return;
    }
    const waited = payload.split(',').filter((id) => this.waiters.has(id));
    if (waited.length > 0) void this.check(waited);
  }

  /** One round of polling: everything waited for is read again (each read settles what finished). */
  private async poll(): Promise<void> {
    if (this.pollReading || (this.waiters.size === 0 && this.readers.size === 0)) return;
    this.pollReading = true;
    try {
      const reads = [...this.readers].flatMap(([id, forId]) => [...forId].map((waiter) => this.reread(id, waiter)));
      if (this.waiters.size > 0) reads.push(this.check([...this.waiters.keys()]));
      await Promise.all(reads);
    } finally {
      this.pollReading = false;
    }
  }

  /** Reads the jobs in one statement and settles the waiters of those that finished. */
  private async check(ids: string[]): Promise<void> {
    let found: Map<string, Job>;
    try {
      found = await readJobs(this.db, ids);
    } catch {
      if (this.closed || this.waiters.size === 0) return;
      this.retryTimer ??= setTimeout(() => {
        this.retryTimer = undefined;
        if (!this.closed) void this.check([...this.waiters.keys()]);
      }, RETRY_READ_MS);
      this.retryTimer.unref();
      return;
    }
    for (const id of ids) {
      const job = found.get(id);
      if (job && !job.finishedAt && !['failed', 'cancelled'].includes(job.state)) continue; // still unfinished
      const forId = this.waiters.get(id);
      if (!forId) continue;
      this.waiters.delete(id);
      for (const waiter of forId) {
        clearTimeout(waiter.timer);
        if (!job) waiter.reject(new JobQueueError('JQ_JOB_NOT_FOUND', `job ${id} does not exist (or it finished and its retention is over: retention.completed 0 keeps no completed job)`));
        else if (job.state === 'completed') waiter.resolve(job);
        else if (job.state === 'cancelled') waiter.reject(new JobEndedError('JQ_JOB_CANCELLED', `job ${id} was cancelled: ${job.lastError ?? ''}`, job));
        else waiter.reject(new JobEndedError('JQ_JOB_FAILED', `job ${id} failed for good after ${job.attempts} attempt(s): ${job.lastError ?? ''}`, job));
      }
    }
  }

  private remove(id: string, waiter: Waiter): void {
    const forId = this.waiters.get(id);
    forId?.delete(waiter);
    if (forId?.size === 0) this.waiters.delete(id);
  }
}
