import { backoffMs, sleep } from '../core/backoff';
import { MAX_JSON_BYTES_LIMIT } from '../core/json';
import type { ClaimToken } from '../core/claim-token';

/** A job that succeeded: its result as JSON text (null for none), and its last progress if not written yet. */
export interface Completion {
  id: string;
  claim: ClaimToken;
  result: string | null;
  progress?: string;
}

/**
 * A failed attempt: the error's message and code, the retry delay (used if attempts are left),
 * the last progress, and the payload the job keeps from now on (JSON text), if it changes (a
 * batch job keeps the elements that failed).
 */
export interface Failure {
  id: string;
  claim: ClaimToken;
  error: string;
  code: string | null;
  delayMs: number;
  progress?: string;
  payload?: string;
}

/** One flush: finished jobs, start marks of prefetched jobs, and progress of running jobs (JSON text). */
export interface ReleaseBatch {
  completed: Completion[];
  failed: Failure[];
  started: string[];
  progress: Map<string, string>;
  /** The claim of each started and progressed job (finished ones carry their own). */
  claims: Map<string, ClaimToken>;
  /** Written again after a failed write, which may have committed: the release must check each job's claim. */
  again?: boolean;
}

/** What writing a batch gives back: the ids it could not write yet because someone else holds their row lock (`busy`), and those it wrote as cancelled (a cancel was recorded first). */
export interface FlushWritten {
  busy: string[];
  cancelled: CancelledJob[];
}

/** Writes one batch. */
export type FlushReleases = (batch: ReleaseBatch) => Promise<FlushWritten>;

/** A job a flush wrote as cancelled, with the reason its cancel gave. */
export interface CancelledJob {
  id: string;
  reason: string | null;
}

/**
 * How long a prefetched job's start mark may wait for a flush to ride on. Most such jobs are
 * fast and finish within it, and then need no mark at all (their release says it all); a
 * worker that dies within it has the job counted as not started (no attempt charged).
 */
const START_MARK_DELAY_MS = 20;

/** Milliseconds a finished job may wait to share a flush. */
const FLUSH_DELAY_MS = 1; // at least 1: core/claim-token.ts relies on it

/**
 * The most JSON text (results, error messages, progress), in characters, that one flush
 * carries: releaseJobs takes each kind as one jsonb object, and a jsonb value holds at most
 * 256 MiB. A character of JSON text becomes at most 6 bytes of jsonb (an array of small
 * numbers; 3 for text), so a flush stays under 192 MiB. What does not fit waits for the next
 * flush; a job larger on its own goes alone, and fits too: `maxJsonBytes` is at most this
 * (the same constant), and a result's bytes are at least its characters.
 */
const FLUSH_MAX_CHARS = MAX_JSON_BYTES_LIMIT;

/** The JSON text a finished job brings to a flush, in characters (a little for its id and keys). */
const textOf = (job: Completion | Failure) =>
  ('result' in job ? (job.result?.length ?? 0) : job.error.length + (job.payload?.length ?? 0)) + (job.progress?.length ?? 0) + 64;

/** How many of `jobs`, from the first, fit in `room` characters (the first always, if `first`); and the room left. */
function fitting(jobs: Array<Completion | Failure>, room: number, first: boolean): [number, number] {
  let count = 0;
  for (const job of jobs) {
    const size = textOf(job);
    if (size > room && !(first && count === 0)) break;
    room -= size;
    count += 1;
  }
  return [count, room];
}

/**
 * How long a release held up by a row lock waits before it is tried again: at once at
 * first, since most such locks are a concurrent claim's, gone within a millisecond (a claim
 * that meets a row this worker just claimed may hold it to the end of its statement); then
 * longer, up to HELD_UP_MAX_MS, for a caller's transaction that may stay open a while.
 */
const heldUpRetryMs = (tries: number) => Math.min(HELD_UP_MAX_MS, 4 ** (tries - 1));
const HELD_UP_MAX_MS = 100;

/**
 * Collects finished jobs and writes them in batches: one statement per flush, at most one
 * flush in flight; what finishes meanwhile waits for the next flush. A failing flush is
 * retried with backoff, never dropped while the worker runs: the jobs stay locked by this
 * worker until it lands. At shutdown it is given up after five tries, its jobs still locked
 * by this worker (for the sweep) and still listed by unwrittenIds(), so that the give-back
 * leaves them alone.
 * A job whose row someone else has locked is set aside and tried again a little later,
 * so that it never holds up the others.
 */
export class ReleaseBatcher {
  private completed: Completion[] = [];
  private failed: Failure[] = [];
  private heldUp: { completed: Completion[]; failed: Failure[] } = { completed: [], failed: [] };
  /** Progress of running jobs, the latest value per job, for the next flush. */
  private progress = new Map<string, string>();
  /** The claims of the jobs in `started` and `progress`. */
  private claims = new Map<string, ClaimToken>();
  private heldUpTimer?: NodeJS.Timeout;
  /** Per held-up job, how many flushes in a row found it locked. */
  private readonly heldUpTries = new Map<string, number>();
  private timer?: NodeJS.Timeout;
  /** Prefetched jobs whose handlers started, to be marked in the next flush. */
  private started = new Set<string>();
  private startTimer?: NodeJS.Timeout;
  private inFlight?: Promise<void>;
  private inFlightIds: string[] = [];
  /**
   * Jobs of flushes given up at shutdown (stop() or after retryBriefly()): not written, and
   * never will be by this batcher. They stay in unwrittenIds(), so that the give-back leaves
   * them locked by this worker, for the sweep; given back, a finished job would run again.
   */
  private dropped: string[] = [];
  /** The progress the flush in flight writes (a job completed in its own transaction takes it along). */
  private inFlightProgress = new Map<string, string>();
  private readonly stopping = new AbortController();

  constructor(
    private readonly write: FlushReleases,
    private readonly onError: (error: unknown) => void,
    /** Told of jobs a flush wrote as cancelled: a cancel was recorded before their outcome. */
    private readonly onCancelled: (jobs: CancelledJob[]) => void = () => {},
    /** Told after each flush, once it landed or was given up at shutdown (its jobs then stay unwritten: see `dropped`). */
    private readonly onWritten: () => void = () => {},
  ) {}

  complete(completion: Completion): void {
    this.completed.push(this.finishing(completion));
    this.schedule();
  }

  fail(failure: Failure): void {
    this.failed.push(this.finishing(failure));
    this.schedule();
  }

  /** A finishing job needs no start mark, and takes its unwritten progress along to its own row. */
  private finishing<Job extends Completion | Failure>(job: Job): Job {
    this.started.delete(job.id);
    job.progress ??= this.progress.get(job.id);
    this.progress.delete(job.id);
    return job;
  }

  /** Records a running job's progress (JSON text) for the next flush; the caller throttles. */
  reportProgress(id: string, json: string, claim: ClaimToken): void {
    this.progress.set(id, json);
    this.claims.set(id, claim);
    this.schedule();
  }

  /** The progress of a running job that waits for the next flush or is being written, if any (JSON text). */
  unwrittenProgress(id: string): string | undefined {
    return this.progress.get(id) ?? this.inFlightProgress.get(id);
  }

  /** A job whose outcome was written elsewhere (its handler's own transaction): no start mark or progress is left to write. */
  forget(id: string): void {
    this.started.delete(id);
    this.progress.delete(id);
  }

  /** Records that a prefetched job's handler started (the claim marked the others). */
  markStarted(id: string, claim: ClaimToken): void {
    this.started.add(id);
    this.claims.set(id, claim);
    this.startTimer ??= setTimeout(() => {
      this.startTimer = undefined;
      if (this.started.size > 0) this.schedule();
    }, START_MARK_DELAY_MS);
  }

  /** Every job whose release is not in the database yet: collected, held up, being written, or given up at shutdown. */
  unwrittenIds(): string[] {
    return [
      ...this.completed.map((c) => c.id),
      ...this.failed.map((f) => f.id),
      ...this.heldUp.completed.map((c) => c.id),
      ...this.heldUp.failed.map((f) => f.id),
      ...this.inFlightIds,
      ...this.dropped,
    ];
  }

  /** Jobs whose release is not in the database yet (unwrittenIds().length). */
  get unwritten(): number {
    return this.pending + this.inFlightIds.length + this.dropped.length;
  }

  get pending(): number {
    return this.completed.length + this.failed.length + this.heldUp.completed.length + this.heldUp.failed.length;
  }

  /** Nothing collected, held up, waiting for its timer, or being written. */
  get idle(): boolean {
    return this.pending === 0 && !this.timer && !this.inFlight && !this.heldUpTimer;
  }

  private schedule(): void {
    if (this.timer || this.inFlight) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, FLUSH_DELAY_MS);
  }

  /** Writes what was collected so far, up to FLUSH_MAX_CHARS (the rest is scheduled for the next flush); resolves once it is in the database. */
  async flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    while (this.inFlight) await this.inFlight;
    if (this.completed.length + this.failed.length + this.started.size + this.progress.size === 0) return;
    this.inFlight = this.writeBatch();
    try {
      await this.inFlight;
    } finally {
      this.inFlight = undefined;
    }
    this.onWritten();
    if (this.completed.length + this.failed.length + this.progress.size > 0) this.schedule();
  }

  private async writeBatch(): Promise<void> {
    const [completedCount, room] = fitting(this.completed, FLUSH_MAX_CHARS, true);
    const [failedCount] = fitting(this.failed, room, completedCount === 0);
    const batch: ReleaseBatch = {
      completed: this.completed.splice(0, completedCount),
      failed: this.failed.splice(0, failedCount),
      started: [...this.started],
      progress: this.progress,
      claims: this.claims,
    };
    this.progress = new Map();
    this.claims = new Map();
    this.started.clear();
    clearTimeout(this.startTimer);
    this.startTimer = undefined;
    this.inFlightIds = [...batch.completed.map((c) => c.id), ...batch.failed.map((f) => f.id)];
    this.inFlightProgress = batch.progress;
    try {
      await this.writeWithRetries(batch);
    } finally {
      this.inFlightIds = [];
      this.inFlightProgress = new Map();
    }
  }

  private async writeWithRetries(batch: ReleaseBatch): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        const written = await this.write(attempt === 1 ? batch : { ...batch, again: true });
        const busy = new Set(written.busy);
        for (const id of this.inFlightIds) if (!busy.has(id)) this.heldUpTries.delete(id);
        if (busy.size > 0) this.holdUp(batch.completed.filter((c) => busy.has(c.id)), batch.failed.filter((f) => busy.has(f.id)));
        if (written.cancelled.length > 0) this.onCancelled(written.cancelled);
        return;
      } catch (error) {
        this.onError(error);
        // While shutting down, give up after a few tries: the jobs stay locked by this worker
        // (listed as dropped, so that the give-back leaves them alone), for the sweep.
        if (this.stopping.signal.aborted && attempt >= 5) {
          this.dropped.push(...this.inFlightIds);
          return;
        }
        await sleep(backoffMs(attempt), this.stopping.signal.aborted ? undefined : this.stopping.signal);
      }
    }
  }

  /** Sets aside releases someone else's row lock held up, and tries them again after a pause. */
  private holdUp(completed: Completion[], failed: Failure[]): void {
    this.heldUp.completed.push(...completed);
    this.heldUp.failed.push(...failed);
    let tries = Infinity;
    for (const id of [...completed.map((c) => c.id), ...failed.map((f) => f.id)]) {
      const n = (this.heldUpTries.get(id) ?? 0) + 1;
      this.heldUpTries.set(id, n);
      tries = Math.min(tries, n);
    }
    this.heldUpTimer ??= setTimeout(() => this.retryHeldUp(), heldUpRetryMs(tries));
  }

  private retryHeldUp(): void {
    clearTimeout(this.heldUpTimer);
    this.heldUpTimer = undefined;
    this.completed.push(...this.heldUp.completed);
    this.failed.push(...this.heldUp.failed);
    this.heldUp = { completed: [], failed: [] };
    this.schedule();
  }

  /** From now on a failing flush is retried a few times only, then dropped (its jobs stay locked, for the sweep). */
  retryBriefly(): void {
    this.stopping.abort();
  }

  /**
   * Flushes what is left; failed flushes are retried only a few times from here on. A
   * release held up by someone else's row lock is retried until it is written: dropping it
   * would leave the give-back that follows to return a finished job to the queue.
   */
  async stop(): Promise<void> {
    this.stopping.abort();
    for (;;) {
      if (this.heldUpTimer) this.retryHeldUp();
      await this.flush();
      while (this.inFlight) await this.inFlight;
      if (this.pending === 0) break;
      await sleep(HELD_UP_MAX_MS);
    }
    clearTimeout(this.timer);
    this.timer = undefined;
    clearTimeout(this.heldUpTimer);
    this.heldUpTimer = undefined;
    clearTimeout(this.startTimer);
    this.startTimer = undefined;
    this.heldUpTries.clear();
  }
}
