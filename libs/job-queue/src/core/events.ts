import type { Job, JobProgress } from './job';

/** What happens in a worker, as an RxJS Observable: `worker.events$`. */
export type JobQueueEvent =
  | { type: 'worker:start'; workerId: string }
  | { type: 'worker:stop'; workerId: string; givenBack: string[] }
  /** A query or the LISTEN connection failed; the worker retries. */
  | {
      type: 'worker:error';
      workerId: string;
      during: 'claim' | 'release' | 'listen' | 'heartbeat' | 'give-back' | 'cron' | 'maintenance';
      error: unknown;
    }
  /**
   * The cluster declared this worker dead (its heartbeats stopped for longer than its
   * timeout, a stall or a partition): the jobs it held were given to other workers. It wrote
   * no outcome for them, aborted their handlers, and rejoined as `newWorkerId`.
   */
  | { type: 'worker:fenced'; workerId: string; newWorkerId: string; lostJobs: string[] }
  | { type: 'job:start'; job: Job }
  /** The handler returned `result`; the job is completed (kept, with its result, for retention.completed). */
  | { type: 'job:success'; job: Job; result: unknown; durationMs: number }
  /** The handler reported progress with ctx.progress(). */
  | { type: 'job:progress'; job: Job; progress: JobProgress }
  /** A job this worker held was written cancelled (its cancel was requested while it ran or waited here). */
  | { type: 'job:cancelled'; jobId: string; reason: string | null }
  /** The attempt failed and the job will run again at `retryAt`. */
  | { type: 'job:error'; job: Job; error: unknown; retryAt: Date; durationMs: number }
  /** The attempt failed and no attempts are left: the job is failed for good (kept for retention.failed). */
  | { type: 'job:failed'; job: Job; error: unknown; durationMs: number }
  /** The handler threw SnoozeJob: the job runs again at `until`, its attempt not spent. */
  | { type: 'job:snoozed'; job: Job; until: Date; durationMs: number }
  /** After success, error or failed. */
  | { type: 'job:complete'; job: Job; error?: unknown }
  /**
   * A handler did not settle after its signal was aborted (its timeout, or the shutdown).
   * Its job stays locked by this worker, and nothing else runs it, until it settles.
   */
  | { type: 'job:stuck'; job: Job; reason: 'timeout' | 'shutdown'; runningMs: number }
  /**
   * On the maintenance leader: a dead worker's job was released. `started`: its handler had
   * begun, so the attempt counted (JQ_WORKER_LOST), and `failed` says it was the last one.
   */
  | { type: 'job:rescued'; jobId: string; taskIdentifier: string; deadWorkerId: string; started: boolean; failed: boolean }
  /**
   * The head of named queue `queueName` failed an attempt and will be retried at `retryAt`:
   * the queue waits behind it until then (until it succeeds, fails for good, or is removed).
   */
  | { type: 'queue:blocked'; queueName: string; job: Job; error: unknown; retryAt: Date }
  /** A cron tick added its job (`backfilled` when it was a missed tick added late). */
  | { type: 'cron:schedule'; identifier: string; ts: Date; backfilled: boolean; jobId: string };

export type JobQueueEventType = JobQueueEvent['type'];

/** The event of one type, for a listener's parameter: `@OnJobEvent('job:failed') onFailed(event: JobQueueEventOf<'job:failed'>)`. */
export type JobQueueEventOf<Type extends JobQueueEventType> = Extract<JobQueueEvent, { type: Type }>;

/** Every event type, at run time (the record makes the compiler check that none is missing). */
const EVENT_TYPES: Record<JobQueueEventType, true> = {
  'worker:start': true,
  'worker:stop': true,
  'worker:error': true,
  'worker:fenced': true,
  'job:start': true,
  'job:success': true,
  'job:progress': true,
  'job:cancelled': true,
  'job:error': true,
  'job:failed': true,
  'job:snoozed': true,
  'job:complete': true,
  'job:stuck': true,
  'job:rescued': true,
  'queue:blocked': true,
  'cron:schedule': true,
};
export const JOB_QUEUE_EVENT_TYPES = Object.keys(EVENT_TYPES) as JobQueueEventType[];
