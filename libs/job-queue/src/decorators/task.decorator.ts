import { SetMetadata } from '@nestjs/common';
import type { RateLimit } from '../core/limits';

export const TASK_METADATA = 'nestjs-job-queue:task';

/** Delay before the next attempt, in milliseconds, given the attempts made so far (1 after the first failure). */
export type RetryDelay = (attempts: number, error: unknown) => number;

export interface TaskOptions {
  /** Default maxAttempts for jobs of this task whose spec does not say. */
  maxAttempts?: number;
  /** Default named queue for jobs of this task whose spec does not say. */
  queueName?: string;
  /** Default priority for jobs of this task whose spec does not say. */
  priority?: number;
  /**
   * How long one attempt may run (ms, or a duration such as '30s'). When it is over,
   * `ctx.signal` aborts and the attempt fails with JQ_JOB_TIMEOUT (retried as usual). A
   * handler that ignores the signal keeps its job, which nothing else runs meanwhile, and
   * is reported stuck. Default: the module's `jobTimeout`, else none.
   */
  timeout?: number | string;
  /**
   * Runs each attempt in a transaction of its own and gives the handler its EntityManager as
   * `ctx.manager`; the job's completion is written in that same transaction. The handler's
   * writes and the completion commit together, or not at all: a throw, a crash, a timeout, a
   * cancel, or the loss of the job to another worker (after a stall) rolls them back, and the
   * job is retried (or ends cancelled). Such a handler holds a pooled connection for its whole
   * run. (River's JobCompleteTx.)
   */
  transaction?: boolean;
  /**
   * At most this many attempts of this task run at once across every worker of the cluster
   * (a whole number ≥ 1; a job a worker has claimed ahead, prefetched, counts as running). Jobs
   * over the limit wait in the table, and hold up no other task. See docs/guides/limits.md.
   */
  globalConcurrency?: number;
  /**
   * At most `max` attempts of this task start in any window of length `per` (ms, or a duration
   * such as '1m'), across every worker of the cluster: `{ max: 100, per: '1m' }`. Jobs held
   * back wait in the table, their attempts not spent, and hold up no other task. A worker
   * claims such a task only for its free slots (no prefetch). See docs/guides/limits.md.
   */
  rateLimit?: RateLimit;
  /**
   * At most this many attempts at once per `group` of the task's jobs (the job spec's `group`,
   * for example a tenant id), across the cluster; groups run side by side. A job without a group
   * is not limited by it. See docs/guides/limits.md.
   */
  groupConcurrency?: number;
  /** `rateLimit` for each `group` of the task's jobs apart: `{ max: 100, per: '1m' }` per tenant. */
  groupRateLimit?: RateLimit;
  /** Replaces the default backoff, exp(min(10, attempts)) seconds. */
  retryDelay?: RetryDelay;
  /** Cron only: payload merged into `{ _cron }` of every scheduled job. */
  payload?: Record<string, unknown>;
  /**
   * Cron only: after downtime, add the ticks missed within this period (ms, or a string
   * such as '1d', '2h30m'), oldest first, marked `backfilled: true`.
   */
  backfillPeriod?: number | string;
}

export interface TaskMetadata {
  identifier: string;
  options: TaskOptions;
}

/**
 * Marks a provider method as the handler of a task. It is called as
 * `(payload, ctx: JobContext)` with `this` bound to its provider.
 */
export function Task(identifier: string, options: TaskOptions = {}): MethodDecorator {
  return SetMetadata<string, TaskMetadata>(TASK_METADATA, { identifier, options });
}
