import type { Job } from '../service/job';

/** What happens in a worker, as an RxJS Observable: `worker.events$`. */
export type JobQueueEvent =
  | { type: 'worker:start'; workerId: string }
  | { type: 'worker:stop'; workerId: string; givenBack: string[] }
  /** A query or the LISTEN connection failed; the worker retries. */
  | { type: 'worker:error'; workerId: string; during: 'claim' | 'release' | 'listen' | 'heartbeat' | 'give-back' | 'cron'; error: unknown }
  | { type: 'job:start'; job: Job }
  | { type: 'job:success'; job: Job; result: unknown; durationMs: number }
  /** The attempt failed and the job will run again at `retryAt`. */
  | { type: 'job:error'; job: Job; error: unknown; retryAt: Date; durationMs: number }
  /** The attempt failed and no attempts are left: the job stays in the table, failed for good. */
  | { type: 'job:failed'; job: Job; error: unknown; durationMs: number }
  /** After success, error or failed. */
  | { type: 'job:complete'; job: Job; error?: unknown }
  /** A cron tick added its job (`backfilled` when it was a missed tick added late). */
  | { type: 'cron:schedule'; identifier: string; ts: Date; backfilled: boolean; jobId: string };

export type JobQueueEventType = JobQueueEvent['type'];
