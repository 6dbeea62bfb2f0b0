import { claimOf } from '../core/claim-token';
import { Logger } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { JobQueueError } from '../core/errors';
import { BatchJobFailure, PermanentJobError, SnoozeJob, TaskRateLimited } from '../core/handler-outcomes';
import type { Job } from '../core/job';
import type { JobContext } from '../core/job-context';
import { errorCode, errorMessage, type JobOutcome } from '../core/job-outcome';
import { MAX_JSON_BYTES_LIMIT, progressToJson, toJsonText } from '../core/json';
import { keepsCompleted } from '../core/options';
import { defaultRetryDelayMs } from '../core/retry-delay';
import type { RegisteredTask } from '../discovery/task-registry';
import type { JobClsContext } from '../peers/job-cls-context';
import type { JobQueueTelemetry } from '../telemetry/job-queue-telemetry';
import { WorkerAttemptContext, type AttemptFlow } from './attempt-context';
import type { JobFlows } from '../service/job-flows';
import { DatabaseStepStore } from './durable-steps';
import { runAttempt } from './job-transaction';
import { RunningJob } from './running-job';
import { WorkerPart, type WorkerParts } from './worker-state';

/** How long a transactional attempt's completion waits for the job's row lock (a caller's add_job holding it) before the attempt fails. */
const COMPLETION_LOCK_TIMEOUT_MS = 1_000;

/**
 * Runs one job and decides its outcome (as River's job executor does): starts its handler in
 * a slot, with its timeout, progress and cancel; then hands the outcome to the release
 * batcher: completed (with its result), retried after the task's delay, failed for good,
 * snoozed or cancelled; and tells the event stream.
 */
export class Executor extends WorkerPart {
  private readonly logger = new Logger('JobQueueWorker');
  /** Every handler's ctx.addJob (one for all: it only passes the call on). */
  private readonly addJob: JobContext['addJob'];
  /** What every handler's ctx.dependencyResults and ctx.continueWith call. */
  private readonly attemptFlow: AttemptFlow;
  /** Where every handler's ctx.step() keeps its results (one for all: told the job each time). */
  private readonly steps: DatabaseStepStore;

  constructor(
    parts: WorkerParts,
    private readonly telemetry: JobQueueTelemetry,
    private readonly clsContext: JobClsContext,
    addJob: JobContext['addJob'],
    /** A slot was freed (after `durationMs` of the handler, when it ran to its outcome): producer.ts. */
    private readonly slotFreed: (durationMs?: number) => void,
    private readonly flows: JobFlows,
  ) {
    super(parts);
    this.addJob = addJob;
    this.attemptFlow = {
      dependencyResults: (jobId) => flows.dependencyResults(jobId),
      continueWith: (entry, identifier, payload, spec) => {
        if (entry.continuation) throw new JobQueueError('JQ_INVALID_FLOW', 'continueWith may be called once per attempt');
        entry.continuation = flows.continuation(identifier, payload, spec);
      },
    };
    this.steps = new DatabaseStepStore(this.db, this.options.maxJsonBytes);
  }

  launch(job: Job): void {
    const { state, events } = this;
    const task = this.tasks.get(job.taskIdentifier)!;
    const entry = new RunningJob(job);
    if (job.startedAt === null) state.batcher.markStarted(job.id, entry.claim);
    const timeoutMs = task.timeoutMs ?? this.options.jobTimeout;
    if (timeoutMs !== undefined) entry.setTimeout(timeoutMs, (reason) => this.reportStuck(entry, reason));
    if (events.heard) events.emit({ type: 'job:start', job });
    const progress = (value: Parameters<typeof progressToJson>[0]) => {
      const json = progressToJson(value);
      if (entry.lost || entry.isSettled) return; // stray calls after the handler returned: its outcome has the last word
      events.emit({ type: 'job:progress', job, progress: JSON.parse(json) });
      entry.reportProgress(json, (written) => state.batcher.reportProgress(job.id, written, entry.claim));
    };
    const context = new WorkerAttemptContext(entry, this.addJob, progress, this.options.middleware, this.attemptFlow, this.steps);
    const workerId = this.membership.workerId;
    const complete = (manager: EntityManager, result: unknown) => this.completeInTransaction(manager, workerId, entry, result);
    const attempt = () => runAttempt(task, job, context, this.db.dataSource, complete);
    const ended = (outcome: JobOutcome): void => {
      entry.settled();
      const committed = outcome.ok && outcome.completedInTransaction === true;
      if (entry.lost) {
        state.lostRunning.delete(entry);
        this.logger.warn(
          `Job ${job.id} (${job.taskIdentifier}) settled after this worker lost it; ` +
            (committed ? 'its transaction had completed it before the loss' : 'its outcome was not written'),
        );
        this.slotFreed();
        return;
      }
      // Given back at shutdown (and perhaps claimed again since): no longer this run's to release.
      if (state.running.get(job.id) !== entry) return;
      state.running.delete(job.id);
      try {
        // A timeout that fires after the transaction committed comes too late to undo it.
        this.settle(task, entry, entry.timedOut && !committed ? { ok: false, error: entry.timedOut } : outcome);
      } finally {
        this.slotFreed(entry.durationMs);
      }
    };
    // A continuation (ctx.continueWith) is written with the completion, in one transaction of its
    // own: the batcher cannot. Checked here rather than in an async wrapper of the attempt, which
    // would cost every job a promise.
    entry.done = this.telemetry
      .traceAttempt(job, () => this.clsContext.run(attempt))
      .then((outcome) => (outcome.ok && !outcome.completedInTransaction && entry.continuation ? this.completeContinued(outcome.result, complete).then(ended) : ended(outcome)));
    state.running.set(job.id, entry);
  }

  /**
   * Cancels of jobs this worker may hold (by NOTIFY, or found at a heartbeat): a running
   * handler is aborted with JQ_JOB_CANCELLED, a prefetched job is dropped unstarted. Either
   * way the release writes the job cancelled: its row says the cancel was requested.
   */
  cancel(ids: string[]): void {
    const { state } = this;
    for (const id of ids) {
      const entry = state.running.get(id);
      if (entry && !entry.cancelled) {
        entry.cancel();
        this.logger.log(`Job ${id} (${entry.job.taskIdentifier}) was cancelled: its handler's signal is aborted`);
        continue;
      }
      const index = state.prefetched.findIndex((job) => job.id === id);
      if (index >= 0) {
        const [job] = state.prefetched.splice(index, 1);
        state.batcher.fail({ id, claim: claimOf(job), error: `JQ_JOB_CANCELLED: job ${id} was cancelled before it started`, code: 'JQ_JOB_CANCELLED', delayMs: 0 });
      }
    }
  }

  /** The worker was declared dead as `oldId`: aborts its handlers (their outcomes are not its to write) and forgets its prefetched jobs. Returns their ids. */
  loseAll(oldId: string): string[] {
    const { state } = this;
    const lost = state.heldIds();
    for (const entry of state.running.values()) {
      entry.lost = true;
      state.lostRunning.add(entry);
      entry.stop(new JobQueueError('JQ_WORKER_LOST', `worker ${oldId} was declared dead; job ${entry.job.id} now belongs to another worker`));
    }
    state.running.clear();
    state.prefetched.length = 0;
    return lost;
  }

  reportStuck(entry: RunningJob, reason: 'timeout' | 'shutdown'): void {
    const { job } = entry;
    this.logger.error(
      `Job ${job.id} (${job.taskIdentifier}) is stuck: its handler ignores the aborted signal (${reason}). ` +
        `The job stays locked by ${this.membership.workerId}, and its slot taken, until the handler settles.`,
    );
    this.events.emit({ type: 'job:stuck', job, reason, runningMs: entry.durationMs });
  }

  /** Completes a job that continues (ctx.continueWith) in a transaction of its own: the continuation and the completion commit together. */
  private async completeContinued(result: unknown, complete: (manager: EntityManager, result: unknown) => Promise<void>): Promise<JobOutcome> {
    try {
      await this.db.dataSource.transaction((manager) => complete(manager, result));
      return { ok: true, result, completedInTransaction: true };
    } catch (error) {
      return { ok: false, error };
    }
  }

  /**
   * The completion of a `transaction: true` attempt (or of one that continues), written in its transaction (sql
   * completeJobInTransaction) just before the commit. Throws, which rolls the transaction
   * back, when the job timed out, was cancelled or lost meanwhile.
   */
  private async completeInTransaction(manager: EntityManager, workerId: string, entry: RunningJob, result: unknown): Promise<void> {
    const { job } = entry;
    const stopped = entry.timedOut ?? entry.cancelled;
    if (stopped) throw stopped;
    const lost = () =>
      new JobQueueError(
        'JQ_WORKER_LOST',
        `job ${job.id} (${job.taskIdentifier}) is no longer held by worker ${workerId} (rescued after a stall, or cancelled): its transaction was rolled back`,
      );
    if (entry.lost) throw lost();
    const progress = entry.unwrittenProgress ?? this.state.batcher.unwrittenProgress(job.id) ?? null;
    const resultJson = this.resultJson(job, result);
    if (entry.continuation && !(await this.flows.continueJob(manager, workerId, job.id, entry.continuation))) throw lost();
    // A caller may hold the job's row (add_job replacing a keyed job) as long as its transaction
    // lasts: rather than wait, holding the handler's locks, the attempt fails and is retried.
    await manager.query(`select set_config('lock_timeout', $1, true)`, [`${COMPLETION_LOCK_TIMEOUT_MS}ms`]);
    const [row] = await this.db.run<{ completed: number; cancelled: boolean }>(
      'completeJobInTransaction',
      [workerId, job.id, resultJson, progress, keepsCompleted(this.options), this.audience.current()],
      manager,
    );
    if (row?.completed === 1) return;
    if (row?.cancelled) {
      entry.cancel(); // a cancel its NOTIFY has not brought yet: the job ends cancelled
      throw entry.cancelled;
    }
    throw lost();
  }

  /** Hands a finished run's outcome to the release batcher and reports it. */
  private settle(task: RegisteredTask, entry: RunningJob, outcome: JobOutcome): void {
    const { state, events } = this;
    const { batcher } = state;
    const { job } = entry;
    const durationMs = entry.durationMs;
    const progress = entry.unwrittenProgress;
    if (outcome.ok && outcome.completedInTransaction) {
      // Completed by its own transaction: nothing is left for the batcher to write.
      batcher.forget(job.id);
      events.emit({ type: 'job:success', job, result: outcome.result, durationMs });
      events.emit({ type: 'job:complete', job });
      return;
    }
    if (entry.cancelled) {
      // Cancelled: the release writes it so (its row says the cancel was requested), whatever the handler did.
      batcher.fail({ id: job.id, claim: entry.claim, error: entry.cancelled.message, code: 'JQ_JOB_CANCELLED', delayMs: 0, progress });
      events.emit({ type: 'job:complete', job, error: entry.cancelled });
      return;
    }
    if (outcome.ok) {
      try {
        const result = this.resultJson(job, outcome.result);
        batcher.complete({ id: job.id, claim: entry.claim, result, progress });
        if (events.heard) {
          events.emit({ type: 'job:success', job, result: outcome.result, durationMs });
          events.emit({ type: 'job:complete', job });
        }
        return;
      } catch (error) {
        outcome = { ok: false, error }; // a result that cannot be stored fails the attempt
      }
    }
    const { error } = outcome;
    // Aborted by the shutdown and settled in time: not the job's fault; stop() gives it back
    // with the attempt returned. (One kept past the give-back counts as it ended.)
    if (state.stopping && entry.aborted && !entry.timedOut && !entry.kept) return;
    const message = errorMessage(error);
    if (error instanceof SnoozeJob) {
      if (error instanceof TaskRateLimited) this.holdTask(error.task, error.delayMs);
      batcher.fail({ id: job.id, claim: entry.claim, error: message, code: error.code, delayMs: error.delayMs, progress });
      events.emit({ type: 'job:snoozed', job, until: new Date(Date.now() + error.delayMs), durationMs });
      events.emit({ type: 'job:complete', job, error });
      return;
    }
    const forGood = error instanceof PermanentJobError;
    const delayMs = forGood ? 0 : retryDelay(task.options.retryDelay, job.attempts, error);
    batcher.fail({ id: job.id, claim: entry.claim, error: message, code: errorCode(error), delayMs, progress, payload: batchPayload(error) });
    if (forGood || job.attempts >= job.maxAttempts) {
      this.logger.error(`Job ${job.id} (${job.taskIdentifier}) failed for good after ${job.attempts} attempt(s): ${message}`);
      events.emit({ type: 'job:failed', job, error, durationMs });
    } else {
      const retryAt = new Date(Date.now() + delayMs);
      this.logger.warn(
        `Job ${job.id} (${job.taskIdentifier}) failed attempt ${job.attempts}/${job.maxAttempts}, retrying at ${retryAt.toISOString()}: ${message}`,
      );
      events.emit({ type: 'job:error', job, error, retryAt, durationMs });
      if (job.queueName !== null) events.emit({ type: 'queue:blocked', queueName: job.queueName, job, error, retryAt });
    }
    events.emit({ type: 'job:complete', job, error });
  }

  /** ctx.rateLimited: holds the task here at once, and on every worker once the hold is written (sql holdTask). */
  private holdTask(task: string, ms: number): void {
    const written = this.db.run('holdTask', [task, ms]);
    written.catch((error: unknown) => this.events.reportError(this.membership.workerId, 'release', error));
    this.controls.hold(task, ms, written);
  }

  /** A handler's return value as the JSON text kept with the completed job: null for none. */
  private resultJson(job: Job, result: unknown): string | null {
    if (result === undefined || result === null) return null;
    return toJsonText(
      result,
      `the result of job ${job.id} (${job.taskIdentifier})`,
      this.options.maxJsonBytes,
      { notJson: 'JQ_RESULT_NOT_JSON', tooLarge: 'JQ_RESULT_TOO_LARGE' },
      'null',
    );
  }
}

/**
 * The payload a failed batch job keeps (JSON text): the elements that failed. Undefined for any
 * other failure, and for elements JSON cannot carry any more (the handler changed them): the
 * job then keeps its whole payload.
 */
function batchPayload(error: unknown): string | undefined {
  if (!(error instanceof BatchJobFailure) || error.payload === undefined) return undefined;
  try {
    return toJsonText(error.payload, 'the failed elements of a batch', MAX_JSON_BYTES_LIMIT, { notJson: 'JQ_INVALID_PAYLOAD', tooLarge: 'JQ_PAYLOAD_TOO_LARGE' }, 'null');
  } catch {
    return undefined;
  }
}

/** The task's retryDelay, or the default backoff when it has none or it does not answer a duration. */
function retryDelay(custom: ((attempts: number, error: unknown) => number) | undefined, attempts: number, error: unknown): number {
  if (!custom) return defaultRetryDelayMs(attempts);
  try {
    const ms = custom(attempts, error);
    return Number.isFinite(ms) && ms >= 0 ? ms : defaultRetryDelayMs(attempts);
  } catch {
    return defaultRetryDelayMs(attempts);
  }
}
