import type { Job } from '../service/job';
import { JobQueueError } from '../errors';

/**
 * A handler that has not settled this long after its signal was aborted (a timeout, the
 * shutdown) is reported stuck: it ignores the signal, and keeps its job and its slot.
 */
export const STUCK_AFTER_MS = 1_000;

/** One job whose handler this worker has started. */
export class RunningJob {
  readonly abort = new AbortController();
  readonly startedAt = performance.now();
  done: Promise<void> = Promise.resolve();
  /** Set when the job ran past its timeout: its outcome is this error, whatever the handler does. */
  timedOut?: JobQueueError;
  /** The worker lost the job (it was declared dead): the outcome is not its to write. */
  lost = false;
  /** Still running after the shutdown's abort: kept locked, not given back, until it settles. */
  kept = false;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(readonly job: Job) {}

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
    if (this.abort.signal.aborted) return; // already stopped (a timeout, then the shutdown): reported once
    this.abort.abort(reason);
    if (onStuck) this.timers.push(setTimeout(onStuck, STUCK_AFTER_MS));
  }

  /** Once the handler settled: no timer may fire for it any more. */
  settled(): void {
    for (const timer of this.timers) clearTimeout(timer);
  }

  get durationMs(): number {
    return performance.now() - this.startedAt;
  }
}
