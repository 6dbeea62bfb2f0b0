/**
 * `nestjs-job-queue/testing`: helpers for an app's own tests, against its real database (as
 * Oban.Testing does for Elixir): run one task's handler directly, find the jobs a call added,
 * and drain the queue.
 */
import type { INestApplicationContext } from '@nestjs/common';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { TaskRegistry } from '../discovery/task-registry';
import { JobQueueError } from '../core/errors';
import { JobQueueDatabase } from '../db/job-queue-database';
import { toJob, type Job, type JobProgress, type JobRow, type JobState } from '../core/job';
import { DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY } from '../core/job-defaults';
import { JobQueueService } from '../service/job-queue.service';
import type { TaskName, TaskPayload } from '../core/typed-tasks';
import { toJsonText } from '../core/json';
import { JobQueueWorker } from '../worker/job-queue.worker';
import { JobClsContext } from '../peers/job-cls-context';
import { runAttempt } from '../worker/job-transaction';
import type { JobContext } from '../core/job-context';
import { MemoryStepStore } from './memory-steps';

export interface RunTaskOptions {
  /** The attempt the handler sees (ctx.job.attempts). Default 1. */
  attempt?: number;
  maxAttempts?: number;
  /** Abort it to test a handler's cancellation or timeout path. */
  signal?: AbortSignal;
  /**
   * Results of durable steps that earlier attempts recorded, by step name: `ctx.step()` with
   * one of these names returns the value given without running its function, as a retry of
   * the job would. The other steps run, and their results are kept in memory for this run.
   */
  steps?: Record<string, unknown>;
}

export interface TaskRun<Result = unknown> {
  /** What the handler returned. */
  result: Result;
  /** Every value it passed to ctx.progress(), in order. */
  progress: JobProgress[];
  /**
   * Every step's result by name, as a later attempt would get it back: those given in `steps`
   * and those that ran. Only there when there is one (a run of a handler without steps is as before).
   */
  steps?: Record<string, unknown>;
}

/**
 * Calls a task's handler with a payload, as the worker would (the same JobContext: logger,
 * signal, addJob, progress, and `manager` in a transaction committed on success for a
 * `transaction: true` task; through the module's middleware; `ctx.step()` with its results in memory,
 * see `RunTaskOptions.steps`), but with no job row: nothing is claimed or released. A handler
 * that throws makes this reject with what it threw. JQ_UNKNOWN_TASK for a task this app has
 * no handler for.
 */
export async function runTask<Name extends TaskName, Result = unknown>(
  app: INestApplicationContext,
  identifier: Name,
  payload: TaskPayload<Name>,
  options: RunTaskOptions = {},
): Promise<TaskRun<Result>> {
  const task = app.get(TaskRegistry).get(identifier);
  if (!task) throw new JobQueueError('JQ_UNKNOWN_TASK', `runTask: no @Task('${identifier}') in this app`);
  const jobs = app.get(JobQueueService);
  const now = new Date();
  const job: Job = {
    id: '0', state: 'running', flowId: '0', flowRef: null, taskIdentifier: identifier, queueName: task.options.queueName ?? null, group: null, payload,
    priority: task.options.priority ?? DEFAULT_PRIORITY, runAt: now, attempts: options.attempt ?? 1,
    maxAttempts: options.maxAttempts ?? task.options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
    lastError: null, key: null, revision: 0, flags: [], lockedAt: now, lockedBy: 'runTask', createdAt: now, updatedAt: now, startedAt: now,
    finishedAt: null, result: null, progress: null, errors: [], workerId: 'runTask', cancelRequestedAt: null, traceContext: null,
  };
  const progress: JobProgress[] = [];
  const db = app.get(JobQueueDatabase);
  const moduleOptions = app.get<ResolvedJobQueueOptions>(JOB_QUEUE_OPTIONS);
  const steps = new MemoryStepStore(options.steps, db.dataSource, moduleOptions.maxJsonBytes);
  const context = {
    signal: options.signal ?? new AbortController().signal,
    addJob: ((name, ...args) => jobs.add(name, ...args)) as JobContext['addJob'],
    progress: (value: JobProgress) => void progress.push(value),
    middleware: moduleOptions.middleware,
    steps,
  };
  // A transactional task gets its transaction, committed if the handler succeeds (there is no job row to complete).
  const attempt = () => runAttempt(task, job, context, db.dataSource, async () => {});
  const outcome = await app.get(JobClsContext).run(attempt);
  if (!outcome.ok) throw outcome.error;
  return { result: outcome.result as Result, progress, ...(steps.results.size > 0 ? { steps: steps.values() } : {}) };
}

/**
 * The jobs of a task whose payload contains `payload` (JSON containment: the fields given,
 * any others), unfinished or finished, oldest first: what a test asserts a call added.
 */
export async function findJobs<Name extends TaskName>(
  app: INestApplicationContext,
  filter: { task: Name; payload?: Partial<TaskPayload<Name>> | Record<string, unknown>; state?: JobState },
): Promise<Job[]> {
  const db = app.get(JobQueueDatabase);
  const payload = toJsonText(filter.payload ?? {}, 'findJobs payload', app.get<ResolvedJobQueueOptions>(JOB_QUEUE_OPTIONS).maxJsonBytes, { notJson: 'JQ_INVALID_PAYLOAD', tooLarge: 'JQ_PAYLOAD_TOO_LARGE' }, '{}');
  const rows = await db.runPlannedEachTime<JobRow>('findJobsOfTask', [filter.task, payload]);
  return rows.map((row) => toJob(row)).filter((job) => filter.state === undefined || job.state === filter.state);
}

/** Runs every available job, and the jobs they add, until none is left and every result is written. */
export function drain(app: INestApplicationContext): Promise<void> {
  return app.get(JobQueueWorker).runUntilIdle();
}
