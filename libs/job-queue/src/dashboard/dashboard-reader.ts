import { Injectable } from '@nestjs/common';
import { JobQueueDatabase } from '../db/job-queue-database';
import type { Flow } from '../core/flow-steps';
import { toJob, type Job, type JobRow } from '../core/job';
import type { JobSchedule } from '../core/schedule';
import type { TaskLimitsEntry } from '../control/job-limits';
import type { PausedEntry } from '../control/paused-entry';
import { JobQueueService, type JobCountsReport } from '../service/job-queue.service';

export interface MinuteCounts {
  /** The minute's start, epoch ms. */
  at: number;
  completed: number;
  failed: number;
}

export interface BlockedQueue {
  queue: string;
  headId: string;
  task: string;
  attempts: number;
  maxAttempts: number;
  /** Null here: the controller fills it in from the head as `redact` returns it. */
  lastError: string | null;
  runAt: Date;
  behind: number;
}

export interface WorkerView {
  id: string;
  hostname: string | null;
  pid: number | null;
  concurrency: number | null;
  startedAt: Date;
  heartbeatAt: Date;
  timeoutMs: number;
  running: string[];
  runningCount: number;
  prefetchedCount: number;
  /** Its last heartbeat is older than its timeout: the sweep is about to declare it dead. */
  late: boolean;
}

/** A schedule as the cron page shows it: listSchedules()'s. */
export type ScheduleView = JobSchedule;

/** What the tasks page shows: every task's limits, what is paused or held, and the tasks' job counts. */
export interface TasksView {
  limits: TaskLimitsEntry[];
  paused: PausedEntry[];
  counts: JobCountsReport['byTask'];
}

/** A durable step a job's handler recorded (ctx.step). */
export interface JobStepView {
  name: string;
  /** When its result was recorded. */
  createdAt: Date;
  /** What the step returned (undefined for nothing). */
  result: unknown;
}

/** What the dashboard's pages read, beyond JobQueueService's lists and counts. */
@Injectable()
export class DashboardReader {
  constructor(
    private readonly db: JobQueueDatabase,
    readonly jobs: JobQueueService,
  ) {}

  async overview(): Promise<{ counts: JobCountsReport; perMinute: MinuteCounts[]; blocked: BlockedQueue[] }> {
    const [counts, minutes, blocked] = await Promise.all([
      this.jobs.countJobs(),
      this.db.run<{ minute: string; completed: number; failed: number }>('finishedPerMinute', []),
      this.db.run<{ queue_name: string; head_id: string; task_identifier: string; attempts: number; max_attempts: number; run_at: Date; behind: number }>('blockedQueues', []),
    ]);
    return {
      counts,
      // the last 60 minutes of the database's clock, the current one last
      perMinute: minutes.map((row) => ({ at: Number(row.minute), completed: row.completed, failed: row.failed })),
      blocked: blocked.map((row) => ({
        queue: row.queue_name,
        headId: row.head_id,
        task: row.task_identifier,
        attempts: row.attempts,
        maxAttempts: row.max_attempts,
        lastError: null,
        runAt: row.run_at,
        behind: row.behind,
      })),
    };
  }

  async workers(): Promise<WorkerView[]> {
    const rows = await this.db.run<{
      id: string; hostname: string | null; pid: number | null; concurrency: number | null; started_at: Date; heartbeat_at: Date;
      timeout_ms: number; running: string[]; running_count: number; prefetched_count: number; now: Date;
    }>('listWorkers', []);
    return rows.map((row) => ({
      id: row.id,
      hostname: row.hostname,
      pid: row.pid,
      concurrency: row.concurrency,
      startedAt: row.started_at,
      heartbeatAt: row.heartbeat_at,
      timeoutMs: row.timeout_ms,
      running: row.running,
      runningCount: row.running_count,
      prefetchedCount: row.prefetched_count,
      late: row.now.getTime() - row.heartbeat_at.getTime() > row.timeout_ms,
    }));
  }

  /**
   * The tasks page's data: listTaskLimits() (this app's tasks and those with limits set), and
   * the tasks other apps run that have jobs or are paused, with no limit known here;
   * listPaused(); countJobs()'s counts per task.
   */
  async tasks(): Promise<TasksView> {
    const [known, paused, counts] = await Promise.all([this.jobs.listTaskLimits(), this.jobs.listPaused(), this.jobs.countJobs()]);
    const listed = new Set(known.map((entry) => entry.task));
    const others = [...Object.keys(counts.byTask), ...paused.filter((p) => p.kind === 'task' && p.name !== '*').map((p) => p.name)].filter((task) => !listed.has(task));
    const limits = [...known, ...[...new Set(others)].map((task) => ({ task, declared: {}, override: null, limits: {} }))].sort((a, b) => a.task.localeCompare(b.task));
    return { limits, paused, counts: counts.byTask };
  }

  /** Every schedule, declared in code or at run time, with its next tick (listSchedules()). */
  async schedules(): Promise<ScheduleView[]> {
    return this.jobs.listSchedules();
  }

  /** The durable steps job `id` recorded, in the order they were recorded (none for a job that has none, or is gone). */
  async steps(id: string): Promise<JobStepView[]> {
    const rows = await this.db.run<{ name: string; created_at: Date; result: string | null }>('listJobSteps', [id]);
    return rows.map((row) => ({ name: row.name, createdAt: row.created_at, result: row.result === null ? undefined : JSON.parse(row.result) }));
  }

  /** The jobs with these ids (none for an empty list). */
  async jobsById(ids: string[]): Promise<Job[]> {
    if (ids.length === 0) return [];
    return (await this.db.run<JobRow>('getJobs', [ids])).map((row) => toJob(row));
  }

  /**
   * The flow with this id, as getFlow() reads it (its state, jobs and edges), or null: no such
   * flow, or `id` is a job of another flow (getFlow takes an unfinished job's id for a flow of
   * its own).
   */
  async flow(id: string): Promise<Flow | null> {
    const flow = await this.jobs.getFlow(id);
    if (!flow || (flow.jobs.length > 0 && flow.jobs.every((job) => job.flowId !== flow.flowId))) return null;
    return flow;
  }

  /**
   * The id of the flow whose page `job`'s links to, or null for a job added alone that never
   * continued (a flow of that one job). A step of addFlow has its ref, a continuation another
   * job's flow id; the job a chain began with has its flows row.
   */
  async flowOf(job: Job): Promise<string | null> {
    if (job.flowRef !== null || job.flowId !== job.id) return job.flowId;
    return (await this.db.run('getFlow', [job.id])).length > 0 ? job.flowId : null;
  }

  /** The job with this id, or the jobs that have or had this key. */
  async find(idOrKey: string): Promise<Job[]> {
    const text = idOrKey.trim();
    if (/^[1-9][0-9]{0,18}$/.test(text)) {
      const job = await this.jobs.getJob(text).catch(() => null);
      if (job) return [job];
    }
    return (await this.db.run<JobRow>('getJobsByKey', [text])).map((row) => toJob(row));
  }
}
