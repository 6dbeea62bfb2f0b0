import { Inject, Injectable } from '@nestjs/common';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import type { EntityManager, ObjectLiteral, Repository } from 'typeorm';
import { JobFlows } from './job-flows';
import { JobLimits, type TaskLimitsEntry } from '../control/job-limits';
import { JobPauses } from '../control/job-pauses';
import type { PausedEntry } from '../control/paused-entry';
import type { TaskLimitsOverride } from '../core/limits';
import { JobSchedules } from './job-schedules';
import type { JobSchedule, ScheduleSpec } from '../core/schedule';
import { readJobs } from './read-jobs';
import { JobAdder } from './job-adder';
import { cancelRefusal, validateReason } from '../core/cancel-outcome';
import type { AddedFlow, Flow, FlowStep } from '../core/flow-steps';
import { JobQueueError } from '../core/errors';
import { JobQueueDatabase } from '../db/job-queue-database';
import { checkDuration } from '../core/duration';
import { toJob, type Job, type JobRow } from '../core/job';
import { JobWaiter } from './job-waiter';
import type { AddArgs, TaskName, TaskPayload, TypedJobSpec } from '../core/typed-tasks';
import { QueueEventAudience } from '../events/queue-event-audience';
import { QueueEventStream } from '../events/queue-event-stream';
import type { QueueEvent } from '../core/queue-events';
import type { Observable } from 'rxjs';
import { countJobs, listJobs, type JobCountsReport, type JobPage, type ListJobsOptions, type RescheduleOptions } from './job-lists';

export type { JobCounts, JobCountsReport, JobPage, ListJobsOptions, RescheduleOptions } from './job-lists';
import { LIMITS, optionalSmallint, optionalString, validateJob, validateJobIds, validateTaskIdentifier } from '../core/validate-job-spec';

/** The longest waitForJob timeout: about 24 days, what a Node.js timer holds. */
const MAX_WAIT_MS = 2_147_483_647;

/** Adds and manages jobs. Every input is checked before anything is written. */
@Injectable()
export class JobQueueService {
  constructor(
    private readonly db: JobQueueDatabase,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
    private readonly flows: JobFlows,
    private readonly waiter: JobWaiter,
    private readonly audience: QueueEventAudience,
    private readonly stream: QueueEventStream,
    private readonly pauses: JobPauses,
    private readonly limits: JobLimits,
    private readonly schedules: JobSchedules,
    private readonly adder: JobAdder,
  ) {}

  /**
   * What happens to any job in the cluster (completed, retrying, failed, cancelled,
   * progress), whichever process ran it, heard while subscribed: at most once, in commit
   * order per job. While anything in this process subscribes, workers publish these events
   * (one notification per release batch); otherwise they cost nothing. `@OnQueueEvent` is the
   * decorator form.
   */
  get queueEvents$(): Observable<QueueEvent> {
    return this.stream.events$;
  }

  /**
   * Adds a job. With `spec.manager` the insert joins that transaction: the job (and the
   * wake-up of the workers) exists only once it commits.
   */
  add<Name extends TaskName>(identifier: Name, ...args: AddArgs<Name>): Promise<Job<TaskPayload<Name>>> {
    return this.adder.add(identifier, ...args);
  }

  /** Adds many jobs in one round trip and one NOTIFY; all are checked before any is written. */
  addMany(specs: readonly TypedJobSpec[], options: { manager?: EntityManager } = {}): Promise<Job[]> {
    return this.adder.addMany(specs, options);
  }

  /**
   * Adds a flow: jobs that wait for other jobs, in one statement (in the caller's transaction
   * when given `manager`). Steps that depend on nothing are claimable at once; the others are
   * `blocked` until their dependencies end (see FlowStep for the failure policies). Checked
   * first, nothing written on bad input: JQ_INVALID_FLOW (a duplicate or unknown ref, a cycle,
   * no step, more than 10,000), or the code of a bad job. Returns the flow's id (its first
   * job's) and each step's job by ref.
   */
  addFlow(steps: readonly FlowStep[], options: { manager?: EntityManager } = {}): Promise<AddedFlow> {
    return this.flows.add(steps, options);
  }

  /** The flow (its state, jobs and edges), or null. A job added alone is a flow of its own: its id is the flow's. */
  getFlow(flowId: string): Promise<Flow | null> {
    return this.flows.get(flowId);
  }

  /**
   * Waits until the flow ends: resolves with each ref's result (a chain's last job's), rejects
   * with JQ_FLOW_FAILED (naming the failed refs) or JQ_FLOW_CANCELLED (a FlowEndedError
   * carrying the flow), JQ_WAIT_TIMEOUT after `timeout`, JQ_FLOW_NOT_FOUND (no such flow, or
   * it completed and its jobs' retention is over: with `retention.completed` 0 a completed
   * flow leaves no results to read). Woken by NOTIFY.
   */
  waitForFlow<Results extends Record<string, unknown> = Record<string, unknown>>(flowId: string, options: { timeout?: number | string } = {}): Promise<Results> {
    const timeout = options?.timeout === undefined ? undefined : checkDuration('timeout', options.timeout, 1, 'JQ_INVALID_SPEC', 'waitForFlow', MAX_WAIT_MS);
    return this.flows.wait(flowId, timeout) as Promise<Results>;
  }

  /**
   * Cancels every unfinished job of the flow: blocked and waiting ones at once, running ones as
   * cancelJob does (their handlers' signals abort, in whatever process). Returns the flow after.
   */
  cancelFlow(flowId: string, reason?: string): Promise<Flow> {
    return this.flows.cancel(flowId, validateReason(reason));
  }

  /** The job, unfinished or finished (while its retention keeps it), or null. */
  async getJob<Payload = unknown, Result = unknown>(id: string): Promise<Job<Payload, Result> | null> {
    const [jobId] = validateJobIds([id]);
    const rows = await this.db.run<JobRow>('getJob', [jobId]);
    return rows[0] ? toJob<Payload, Result>(rows[0]) : null;
  }

  /**
   * Cancels a job. One that no worker holds is cancelled at once. For one a worker holds
   * (running, or claimed and about to start) the cancel is recorded in its row and its worker
   * told, in whatever process it runs: the handler's signal aborts with JQ_JOB_CANCELLED and
   * the job ends cancelled, whatever the handler then does. The job returned is read right
   * after: still running (or waiting) with `cancelRequestedAt` set, or already cancelled if
   * its worker was quick. A finished job cannot be cancelled: JQ_JOB_FINISHED.
   */
  async cancelJob(id: string, reason?: string): Promise<Job> {
    const [jobId] = validateJobIds([id]);
    const [{ outcome, state }] = await this.db.run<{ outcome: string; state: string | null }>('cancelJob', [jobId, validateReason(reason)]);
    const refusal = cancelRefusal(jobId, outcome, state);
    if (refusal) throw refusal;
    // cancelled here, not by a worker's release, which publishes its own
    const audience = outcome === 'cancelled' ? await this.audience.fresh() : null;
    if (audience !== null) await this.db.run('publishCancelled', [jobId, audience]);
    const job = await this.getJob(jobId);
    if (!job) throw new JobQueueError('JQ_JOB_NOT_FOUND', `job ${jobId} does not exist`); // deleted right after (retention 0)
    return job;
  }

  /**
   * Moves failed or cancelled jobs back to the queue, due now, their attempts reset (their
   * errors kept). Returns the jobs retried; ids of other jobs are ignored, and so is a job
   * whose key a newer unfinished job has taken.
   */
  async retryJobs(ids: string[]): Promise<Job[]> {
    const rows = await this.db.run<{ id: string }>('retryJobs', [validateJobIds(ids)]);
    return this.jobsById(rows.map((row) => row.id));
  }

  /**
   * Retries every failed job of a task that retention still keeps, 1,000 per statement.
   * Returns how many were retried (a job whose key a newer unfinished job holds is not).
   */
  async retryFailedJobs(task: string): Promise<number> {
    validateTaskIdentifier(task);
    let retried = 0;
    let cursor: [string | null, string | null] = [null, null];
    for (;;) {
      const [page] = await this.db.run<RetryPage>('retryFailedOfTask', [task, ...cursor]);
      retried += page.retried;
      if (page.next_at === null) return retried;
      cursor = [page.next_at, page.next_id];
    }
  }

  /**
   * Deletes a job, unfinished or finished, and tells its waiters (they get JQ_JOB_NOT_FOUND).
   * A job a worker holds cannot be deleted (JQ_JOB_RUNNING: cancel it first); an unknown id
   * gets JQ_JOB_NOT_FOUND.
   */
  async deleteJob(id: string): Promise<void> {
    const [jobId] = validateJobIds([id]);
    // Nothing deleted may mean the row changed while the statement waited for it (a worker
    // claimed it, or it moved to finished_jobs): the statement's snapshot cannot see that.
    // A second statement, with a snapshot taken after that commit, answers for the row as it is now.
    for (let attempt = 1; ; attempt++) {
      const [{ deleted, held }] = await this.db.run<{ deleted: number; held: boolean }>('deleteJob', [jobId]);
      if (held) throw new JobQueueError('JQ_JOB_RUNNING', `job ${jobId} is held by a worker: cancel it first`);
      if (deleted > 0) return;
      if (attempt === 2) throw new JobQueueError('JQ_JOB_NOT_FOUND', `job ${jobId} does not exist`);
    }
  }

  /**
   * Waits until the job finishes: resolves with the completed job (its `result` included),
   * rejects with JQ_JOB_FAILED or JQ_JOB_CANCELLED (a JobEndedError carrying the job), with
   * JQ_WAIT_TIMEOUT after `timeout` (ms or a duration string; none by default), and with
   * JQ_JOB_NOT_FOUND for an unknown job. With `retention.completed` 0 a completed job leaves
   * nothing to read: JQ_JOB_NOT_FOUND too. Works in a producer-only app (`worker: false`).
   */
  async waitForJob<Result = unknown>(id: string, options: { timeout?: number | string } = {}): Promise<Job<unknown, Result>> {
    const [jobId] = validateJobIds([id]);
    const timeout = options?.timeout === undefined ? undefined : checkDuration('timeout', options.timeout, 1, 'JQ_INVALID_SPEC', 'waitForJob', MAX_WAIT_MS);
    return (await this.waiter.wait(jobId, timeout)) as Job<unknown, Result>;
  }

  /** A page of jobs, filtered by state, task and queue; see ListJobsOptions for the order. */
  listJobs(options: ListJobsOptions = {}): Promise<JobPage> {
    return listJobs(this.db, options);
  }

  /**
   * How many jobs are in each state, in all and per task and per queue. Unfinished jobs are
   * counted in `jobs` (as many rows as the backlog); finished ones come from the counts that
   * triggers on `finished_jobs` keep, so a long history costs nothing here.
   */
  countJobs(): Promise<JobCountsReport> {
    return countJobs(this.db);
  }

  /**
   * Pauses named queue `name` on every replica, until resumeQueue: no worker of this release
   * starts its jobs (within a notification's delay, at most a pollInterval), jobs running
   * finish, and its jobs keep their order (docs/guides/pause.md). Kept in the database.
   */
  pauseQueue(name: string): Promise<void> {
    return this.pauses.pauseQueue(name);
  }

  resumeQueue(name: string): Promise<void> {
    return this.pauses.resumeQueue(name);
  }

  /** Pauses task `identifier` ('*': every task) on every replica, as pauseQueue does a queue; its job at a named queue's head holds that queue. */
  pauseTask(identifier: string): Promise<void> {
    return this.pauses.pauseTask(identifier);
  }

  resumeTask(identifier: string): Promise<void> {
    return this.pauses.resumeTask(identifier);
  }

  /** What is paused: tasks ('*' for all) and queues, with when; a task held by `ctx.rateLimited()` with when its hold ends. */
  listPaused(): Promise<PausedEntry[]> {
    return this.pauses.listPaused();
  }

  /**
   * Overrides task `identifier`'s limits on every replica, until resetTaskLimits: each limit
   * given replaces the decorator's (`{ globalConcurrency: 2 }`, `{ rateLimit: { max: 10, per:
   * '1m' } }`), null removes it, and limits set by an earlier call stay. Workers follow within a
   * notification's delay, at most a pollInterval (docs/guides/limits.md). Kept in the database.
   */
  setTaskLimits(identifier: string, limits: TaskLimitsOverride): Promise<void> {
    return this.limits.setTaskLimits(identifier, limits);
  }

  /** Back to the limits task `identifier` declares in code, on every replica. */
  resetTaskLimits(identifier: string): Promise<void> {
    return this.limits.resetTaskLimits(identifier);
  }

  /** This app's tasks and those with limits set at run time: declared, set, and in force (`limits`). */
  listTaskLimits(): Promise<TaskLimitsEntry[]> {
    return this.limits.listTaskLimits();
  }

  /** Deletes the pending job with this key; a job a worker holds is left alone (null is returned). */
  async removeJob(jobKey: string): Promise<Job | null> {
    const key = optionalString(jobKey, 'JQ_INVALID_JOB_KEY', 'jobKey', LIMITS.jobKeyLength);
    if (key === null) throw new JobQueueError('JQ_INVALID_JOB_KEY', 'jobKey is required');
    const rows = await this.db.run<JobRow>('removeJob', [key]);
    return rows[0] ? toJob(rows[0]) : null;
  }

  /**
   * Completes jobs no worker holds (waiting, scheduled, retrying or blocked), with `result`
   * when given, in the caller's transaction when given `manager`: completion from outside,
   * for approvals and webhooks. Their flows' dependents unblock at the commit. A job a worker
   * holds is refused with JQ_JOB_RUNNING, and nothing is written; finished or unknown ids are
   * ignored. Returns the jobs completed.
   */
  completeJobs(ids: string[], options: { result?: unknown; manager?: EntityManager } = {}): Promise<Job[]> {
    return this.flows.complete(ids, options);
  }

  /** Fails unfinished jobs for good, with `reason` as their error. Jobs a worker holds are skipped. Returns the jobs failed. */
  async permanentlyFailJobs(ids: string[], reason?: string): Promise<Job[]> {
    if (reason !== undefined && typeof reason !== 'string') throw new JobQueueError('JQ_INVALID_SPEC', 'reason must be a string');
    const rows = await this.db.run<JobRow>('permanentlyFailJobs', [validateJobIds(ids), reason ?? null]);
    return this.jobsById(rows.map((row) => String(row.id)));
  }

  /** The jobs with these ids as they are now, in the order given. */
  private async jobsById(ids: string[]): Promise<Job[]> {
    const byId = await readJobs(this.db, ids);
    return ids.flatMap((id) => byId.get(id) ?? []);
  }


  /** Changes when and how jobs run. Jobs a worker holds are skipped. */
  async rescheduleJobs(ids: string[], options: RescheduleOptions): Promise<Job[]> {
    const jobIds = validateJobIds(ids);
    const { runAt, priority, attempts, maxAttempts } = options ?? {};
    validateJob('reschedule', undefined, { runAt, priority, maxAttempts });
    optionalSmallint(attempts, 'JQ_INVALID_SPEC', 'attempts', 0);
    const rows = await this.db.run<JobRow>('rescheduleJobs', [
      jobIds,
      runAt ?? null,
      priority ?? null,
      attempts ?? null,
      maxAttempts ?? null,
    ]);
    return rows.map((row) => toJob(row));
  }

  /**
   * Creates or changes a recurring job at run time: `cron` (an expression, read in `timeZone`,
   * default UTC) or `every` (a duration: ticks at its whole multiples since the Unix epoch), the
   * task `identifier`, and what each tick's job carries. Kept in the database: every process
   * ticks it within its `pollInterval`, each tick once across the cluster. A schedule declared
   * in code (`@Cron`, `crontab`) cannot be changed here. Bad input: JQ_INVALID_SCHEDULE,
   * JQ_INVALID_CRON_EXPRESSION, JQ_INVALID_TIME_ZONE, JQ_UNKNOWN_TASK (and the job spec's codes).
   */
  async upsertSchedule(id: string, spec: ScheduleSpec): Promise<JobSchedule> {
    return this.schedules.upsert(id, spec);
  }

  /** Removes a run-time schedule: true if removed, false if there was none. A schedule declared in code: JQ_SCHEDULE_DECLARED_IN_CODE. */
  async removeSchedule(id: string): Promise<boolean> {
    return this.schedules.remove(id);
  }

  /** Pauses a schedule, declared in code or not, in every process: its ticks are skipped until resumeSchedule (JQ_SCHEDULE_NOT_FOUND if none). */
  async pauseSchedule(id: string): Promise<JobSchedule> {
    return this.schedules.setPaused(id, true);
  }

  /** Resumes a paused schedule from its next tick; the ticks of its pause are not added. */
  async resumeSchedule(id: string): Promise<JobSchedule> {
    return this.schedules.setPaused(id, false);
  }

  /** Every schedule, declared in code (`declaredInCode`) or at run time, by id, with its next tick. */
  async listSchedules(): Promise<JobSchedule[]> {
    return this.schedules.list();
  }

  /**
   * A TypeORM repository over the jobs table, for reads (find, count, query builder).
   * The job entities must be registered in the DataSource (see the README).
   */
  jobRepository<Entity extends ObjectLiteral = ObjectLiteral>(): Repository<Entity> {
    const { dataSource } = this.db;
    const metadata = dataSource.entityMetadatas.find((m) => m.tablePath === `${this.options.schema}.jobs`);
    if (!metadata) {
      throw new JobQueueError(
        'JQ_ENTITIES_NOT_REGISTERED',
        `no entity for ${this.options.schema}.jobs in the DataSource: add JobQueueEntities (or createJobQueueEntities('${this.options.schema}')) to its entities`,
      );
    }
    return dataSource.getRepository<Entity>(metadata.target);
  }
}

/** One page of retryFailedJobs: how many it retried, and the cursor of the next (null after the last). */
interface RetryPage {
  retried: number;
  next_at: string | null;
  next_id: string | null;
}
