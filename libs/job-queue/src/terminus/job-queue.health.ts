import { Inject, Injectable } from '@nestjs/common';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { parseDuration } from '../core/duration';
import { JobQueueError } from '../core/errors';
import { toPausedEntry, type PausedEntry, type PausedRow } from '../control/paused-entry';
import { JobQueueDatabase } from '../db/job-queue-database';
import { JobQueueWorker } from '../worker/job-queue.worker';

export interface JobQueueHealthOptions {
  /**
   * The oldest job a worker could start and none has taken may wait this long (ms or a
   * duration such as '5m') before the queue counts as down: workers are missing, stuck or too
   * few. A named queue's jobs count only as its head while no job of it runs: a queue waiting
   * behind a long job, or for its head's retry, is not a backlog. Paused tasks and queues
   * (pauseTask, pauseQueue) are not either: the result lists them as `paused`. Default 5 minutes.
   */
  maxDueAge?: number | string;
  /** How long the database may take to answer `select 1`. Default 3 s. */
  timeout?: number | string;
}

/**
 * For `@nestjs/terminus`: `() => this.jobQueue.isHealthy('jobQueue', { maxDueAge: '2m' })` in a
 * HealthCheckService.check() list. Up when the database answers, this process's worker (if it
 * has one) runs with its LISTEN connection and recent heartbeats, and the oldest due job is
 * younger than `maxDueAge`. Down otherwise, with what failed in `message`.
 */
@Injectable()
export class JobQueueHealthIndicator {
  constructor(
    private readonly health: HealthIndicatorService,
    private readonly db: JobQueueDatabase,
    private readonly worker: JobQueueWorker,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
  ) {}

  async isHealthy<const Key extends string = 'jobQueue'>(key: Key = 'jobQueue' as Key, options: JobQueueHealthOptions = {}): Promise<HealthIndicatorResult<Key>> {
    const maxDueAgeMs = durationOption('maxDueAge', options.maxDueAge, 5 * 60_000);
    const timeoutMs = durationOption('timeout', options.timeout, 3_000);
    const session = this.health.check(key);
    const problems: string[] = [];

    let due: { count: number; oldest_age: number | null } | undefined;
    let paused: PausedEntry[] | null = null;
    try {
      const [startable, pauses] = await withTimeout(
        Promise.all([this.db.run<{ count: number; oldest_age: number | null }>('startableJobs', []), this.db.run<PausedRow>('listPaused', [])]),
        timeoutMs,
      );
      due = startable[0];
      paused = pauses.map(toPausedEntry);
    } catch (error) {
      problems.push(`the database did not answer: ${error instanceof Error ? error.message : String(error)}`);
    }
    const oldestDueAgeMs = due?.oldest_age == null ? 0 : Math.round(due.oldest_age * 1000);
    if (due && oldestDueAgeMs > maxDueAgeMs) problems.push(`the oldest due job has waited ${Math.round(oldestDueAgeMs / 1000)} s (more than ${Math.round(maxDueAgeMs / 1000)} s)`);

    const worker = this.workerHealth(problems);
    // Paused tasks and queues are listed, not judged: their jobs wait by design and count in neither dueJobs nor oldestDueAgeMs.
    const data = { database: due ? 'up' : 'down', worker, dueJobs: due?.count ?? null, oldestDueAgeMs: due ? oldestDueAgeMs : null, paused };
    return problems.length === 0 ? session.up(data) : session.down({ message: problems.join('; '), ...data });
  }

  /** This process's worker, judged by its own reports; 'disabled' in a producer-only app (`worker: false`). */
  private workerHealth(problems: string[]): Record<string, unknown> | 'disabled' {
    if (!this.options.worker) return 'disabled';
    const status = this.worker.status();
    // two heartbeats missed: the database is slow or unreachable, or the event loop is blocked
    const stale = 2 * this.options.heartbeatInterval + 1_000;
    const heartbeatAgeMs = status.lastHeartbeatAt ? Date.now() - status.lastHeartbeatAt.getTime() : null;
    if (!status.running) problems.push('the worker is not running');
    else {
      // a worker behind a transaction-mode pooler without listenUrl polls by design: it has no LISTEN to lose
      if (!status.listening && !status.polling) problems.push('the worker has lost its LISTEN connection');
      if (!status.registered) problems.push('the worker was declared dead and is rejoining');
      if (heartbeatAgeMs === null || heartbeatAgeMs > stale) problems.push(`the worker's last heartbeat was ${heartbeatAgeMs === null ? 'never' : `${heartbeatAgeMs} ms ago`}`);
    }
    return { id: this.worker.workerId, running: status.running, listening: status.listening, polling: status.polling, heartbeatAgeMs, runningJobs: status.runningJobs };
  }
}

function durationOption(name: string, value: number | string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const ms = parseDuration(value);
  if (ms === undefined || ms <= 0) throw new JobQueueError('JQ_INVALID_OPTIONS', `JobQueueHealthIndicator: ${name} must be a positive duration (ms or such as '5m'), got ${String(value)}`);
  return ms;
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms)));
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
