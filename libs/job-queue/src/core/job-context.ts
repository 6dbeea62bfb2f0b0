import type { Logger } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import type { DependencyResult } from './flow-steps';
import type { Job, JobProgress } from './job';
import type { AddArgs, TaskName, TaskPayload } from './typed-tasks';

/** What a handler learns about the job it runs. */
export interface JobInfo {
  id: string;
  taskIdentifier: string;
  attempts: number;
  maxAttempts: number;
  queueName: string | null;
  /** Its `group` (limits per group: `groupConcurrency`, `groupRateLimit`), or null. */
  group: string | null;
  key: string | null;
  runAt: Date;
  flags: string[];
  createdAt: Date;
  /** Its flow's id (addFlow's, or its own for a job added alone). */
  flowId: string;
  /** Its step's ref in its flow; null for a job added alone. */
  flowRef: string | null;
}

/** The second argument of every task handler. */
export interface JobContext {
  job: JobInfo;
  /** A Nest logger whose context names the task and the job. */
  logger: Logger;
  /**
   * Aborted, with a reason saying why, when the job runs past its timeout (JQ_JOB_TIMEOUT),
   * when it is cancelled (JQ_JOB_CANCELLED), when the worker shuts down and the grace period
   * is over, and when the worker learns it lost the job (JQ_WORKER_LOST). Pass it on to what
   * the handler awaits.
   */
  signal: AbortSignal;
  /**
   * Reports progress: a number from 0 to 100, or a small JSON object (at most 4 kB). Emitted
   * at once as a `job:progress` event; stored at most once a second, the last value always.
   * Throws JQ_INVALID_PROGRESS for anything else.
   */
  progress: (value: JobProgress) => void;
  /**
   * Adds another job: the same signature as `JobQueueService.add`. In a `transaction: true`
   * task it joins the attempt's transaction unless the spec names another `manager`: the job
   * exists only if the attempt commits.
   */
  addJob: <Name extends TaskName>(identifier: Name, ...args: AddArgs<Name>) => Promise<Job<TaskPayload<Name>>>;
  /**
   * A flow's job: its direct dependencies by ref, as they ended (state, and the result or the
   * error). A failure the step's policy is `ignore` for is left out. Read from the database
   * at each call; `{}` for a job with no dependency.
   */
  dependencyResults: () => Promise<Record<string, DependencyResult>>;
  /**
   * Adds the next job of this job's chain, of the same flow and ref, committed together with
   * this attempt's completion: if the attempt fails, the continuation does not exist. Jobs that
   * depend on this one wait for the end of its chain, and get its last job's result. Once per
   * attempt; the job is checked at once (a bad one throws, with its code), and takes no jobKey.
   */
  continueWith: <Name extends TaskName>(identifier: Name, ...args: AddArgs<Name>) => void;
  /**
   * Only for a task declared with `@Task(name, { transaction: true })`: an EntityManager in a
   * transaction that also completes the job. What the handler writes through it commits
   * together with the job's completion, or not at all. Type the handler's context as
   * `TransactionalJobContext` to have it non-optional.
   */
  manager?: EntityManager;
  /**
   * Ends this attempt without counting it and holds the task's starts on every worker for
   * `retryAfter` (ms, or a duration such as '30s'; at most 31 days): call it when a partner
   * answers 429. The job runs again after `retryAfter`, with the task's other jobs. It throws
   * (the attempt's outcome), so nothing after it runs; a bad `retryAfter` throws
   * JQ_INVALID_LIMIT, which fails the attempt as any error does. See docs/guides/limits.md.
   */
  rateLimited: (retryAfter: number | string) => never;
  /**
   * Runs `fn` once per job and records what it returns (a durable step): a later attempt of
   * the job, after a failure, a timeout or a crash, gets the recorded value back without
   * running `fn` again. What comes back, then and the first time, is the value as JSON gives
   * it back (a Date becomes its ISO string); `undefined` is kept as `undefined`. The value
   * must be JSON of at most `maxJsonBytes` (JQ_RESULT_NOT_JSON, JQ_RESULT_TOO_LARGE).
   *
   * Each name may be used once per attempt (JQ_DUPLICATE_STEP): the name is what a later
   * attempt finds the result by. A plain step that the process dies inside of, after `fn` ran
   * but before its record was written, runs again; with `{ transaction: true }`, `fn` gets an
   * EntityManager in a transaction of its own on the app's DataSource, and what it writes
   * there commits together with the step's record, exactly once.
   */
  step<T>(name: string, fn: () => T | Promise<T>, options?: StepOptions & { transaction?: false }): Promise<T>;
  step<T>(name: string, fn: (manager: EntityManager) => T | Promise<T>, options: StepOptions & { transaction: true }): Promise<T>;
}

/** The options of `ctx.step()`. */
export interface StepOptions {
  /** Run the step in a transaction of its own, which also records its result: its writes happen exactly once. Default false. */
  transaction?: boolean;
}

/** The context of a `@Task(name, { transaction: true })` handler: `manager` is always there. */
export interface TransactionalJobContext extends JobContext {
  manager: EntityManager;
}

/** The payload of a job added by a cron schedule. */
export interface CronPayload {
  _cron: { ts: string; backfilled: boolean };
  [key: string]: unknown;
}
