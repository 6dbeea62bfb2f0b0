import { claimOf, type ClaimToken } from '../core/claim-token';
import type { Job } from '../core/job';
import { JobQueueError } from '../core/errors';
import type { ValidJob } from '../core/validate-job-spec';

/**
 * A handler that has not settled this long after its signal was aborted (a timeout, the
 * shutdown) is reported stuck: it ignores the signal, and keeps its job and its slot.
 */
export const STUCK_AFTER_MS = 1_000;

/** Progress is written at most this often per job (the last value is always written). */
export const PROGRESS_WRITE_EVERY_MS = 1_000;

/** One job whose handler this worker has started. */
export class RunningJob {
  readonly startedAt = performance.now();
  done: Promise<void> = Promise.resolve();
  /** Set when the job ran past its timeout: its outcome is this error, whatever the handler does. */
  timedOut?: JobQueueError;
  /** The worker lost the job (it was declared dead): the outcome is not its to write. */
  lost = false;
  /** Still running after the shutdown's abort: kept locked, not given back, until it settles. */
  kept = false;
  /** Set when its cancel was heard: the job ends cancelled whatever the handler does. */
  cancelled?: JobQueueError;
  /** Progress reported but not handed to the batcher yet (JSON text): it rides on the release. */
  unwrittenProgress?: string;
  /** Made when the handler first reads its signal: most never do, and an AbortController was 4 % of a drain's JavaScript. */
  private controller?: AbortController;
  private abortedWith?: Error;
  private lastProgressWrite = -Infinity;
  private progressTimer?: NodeJS.Timeout;
  private readonly timers: NodeJS.Timeout[] = [];

  /** The job's next in its chain (ctx.continueWith), written with its completion. */
  continuation?: ValidJob;

  /**
   * The claim its release names (ClaimToken). A claim lost in a server crash and made again by
   * this worker while the handler runs (producer.ts does not start it twice) moves it to the new claim.
   */
  claim: ClaimToken;

  constructor(readonly job: Job) {
    this.claim = claimOf(job);
  }

  /** The handler's `ctx.signal`: aborted (with the reason) by a timeout, a cancel or the shutdown, even if first read after. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.abortedWith) this.controller.abort(this.abortedWith);
    }
    return this.controller.signal;
  }

  /** Whether its signal was aborted (read or not). */
  get aborted(): boolean {
    return this.abortedWith !== undefined;
  }

  /** Aborts the handler's signal when `timeoutMs` is over, and reports it stuck if it ignores that. */
  setTimeout(timeoutMs: number, onStuck: (reason: 'timeout') => void): void {
    this.timers.push(
      setTimeout(() => {
        this.timedOut = new JobQueueError(
          'JQ_JOB_TIMEOUT',
          `job ${this.job.id} (${this.job.taskIdentifier}) ran past its timeout of ${timeoutMs} ms`,
        );
        this.stop(this.timedOut, () => onStuck('timeout'));
      }, timeoutMs),
    );
  }

  /** Aborts the handler's signal with `reason`; `onStuck` runs if it has not settled STUCK_AFTER_MS later. */
  stop(reason: Error, onStuck?: () => void): void {
    if (this.abortedWith) return; // already stopped (a timeout, then the shutdown): reported once
    this.abortedWith = reason;
    this.controller?.abort(reason);
    if (onStuck) this.timers.push(setTimeout(onStuck, STUCK_AFTER_MS));
  }

  /** Aborts the handler because the job was cancelled: it ends cancelled, whatever the handler does. */
  cancel(): void {
    this.cancelled ??= new JobQueueError('JQ_JOB_CANCELLED', `job ${this.job.id} (${this.job.taskIdentifier}) was cancelled`);
    this.stop(this.cancelled);
  }

  /**
   * Passes progress (JSON text) to `write` at most once per PROGRESS_WRITE_EVERY_MS; a value
   * that comes sooner waits for the end of the period, replaced by any later one, or rides
   * on the release if the handler settles first.
   */
  reportProgress(json: string, write: (json: string) => void): void {
    this.unwrittenProgress = json;
    if (this.progressTimer) return;
    const wait = this.lastProgressWrite + PROGRESS_WRITE_EVERY_MS - performance.now();
    const flush = () => {
      this.progressTimer = undefined;
      if (this.unwrittenProgress === undefined) return;
      write(this.unwrittenProgress);
      this.unwrittenProgress = undefined;
      this.lastProgressWrite = performance.now();
    };
    if (wait <= 0) flush();
    else this.progressTimer = setTimeout(flush, wait);
  }

  /** Set once the handler settled. */
  isSettled = false;

  /** Once the handler settled: no timer may fire for it any more. */
  settled(): void {
    this.isSettled = true;
    for (const timer of this.timers) clearTimeout(timer);
    clearTimeout(this.progressTimer);
    this.progressTimer = undefined;
  }

  get durationMs(): number {
    return performance.now() - this.startedAt;
  }
}
