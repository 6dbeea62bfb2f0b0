import { Injectable } from '@nestjs/common';
import { JobQueueError } from '../core/errors';
import { checkScheduleSpec, storedTiming, validateScheduleId, type JobSchedule, type ScheduleSpec } from '../core/schedule';
import { JobQueueDatabase } from '../db/job-queue-database';
import type { ScheduleRow } from '../sql/cron';
import { JobSpecValidator } from './job-spec-validator';

/**
 * Schedules at run time (JobQueueService's upsertSchedule, removeSchedule, pauseSchedule,
 * resumeSchedule, listSchedules), kept in known_crontabs beside those declared in code. Every
 * process's CronScheduler reads them within its `pollInterval` and ticks them, each tick once
 * across the cluster (cron/cron-scheduler.ts). Input is checked before anything is written.
 */
@Injectable()
export class JobSchedules {
  constructor(
    private readonly db: JobQueueDatabase,
    private readonly specs: JobSpecValidator,
  ) {}

  /** Creates or changes run-time schedule `id`. A schedule declared in code cannot be changed here (JQ_SCHEDULE_DECLARED_IN_CODE). */
  async upsert(id: string, spec: ScheduleSpec): Promise<JobSchedule> {
    const scheduleId = validateScheduleId(id);
    const { timing, backfillMs } = checkScheduleSpec(scheduleId, spec);
    const job = (() => {
      try {
        return this.specs.validate(spec.identifier, spec.payload ?? {}, { queueName: spec.queueName, priority: spec.priority });
      } catch (error) {
        return JobQueueError.rethrowAt(`schedule '${scheduleId}'`, error);
      }
    })();
    const [row] = await this.db.run<ScheduleRow>('upsertSchedule', [
      scheduleId,
      job.identifier,
      timing.expression,
      timing.everyMs,
      timing.timeZone,
      job.payloadJson,
      spec.queueName ?? null,
      spec.priority ?? null,
      backfillMs,
    ]);
    if (!row) throw declaredInCode(scheduleId, 'changed');
    return toJobSchedule(row);
  }

  /** Removes run-time schedule `id`: true if it was removed, false if there was none. */
  async remove(id: string): Promise<boolean> {
    const [row] = await this.db.run<{ removed: number; kind: string | null }>('removeSchedule', [validateScheduleId(id)]);
    if (row.kind !== null) throw declaredInCode(id, 'removed');
    return row.removed > 0;
  }

  /** Pauses or resumes schedule `id`, declared in code or not. A paused schedule adds no job; its ticks are skipped, not added on resume. */
  async setPaused(id: string, paused: boolean): Promise<JobSchedule> {
    const [row] = await this.db.run<ScheduleRow>(paused ? 'pauseSchedule' : 'resumeSchedule', [validateScheduleId(id)]);
    if (!row) throw new JobQueueError('JQ_SCHEDULE_NOT_FOUND', `no schedule '${id}': listSchedules() lists them`);
    return toJobSchedule(row);
  }

  async list(): Promise<JobSchedule[]> {
    const rows = await this.db.run<ScheduleRow>('listSchedules', []);
    const now = new Date();
    return rows.map((row) => toJobSchedule(row, now));
  }
}

function declaredInCode(id: string, what: string): JobQueueError {
  return new JobQueueError(
    'JQ_SCHEDULE_DECLARED_IN_CODE',
    `schedule '${id}' is declared in code (@Cron or crontab): it is ${what} in the code and a deploy, not at run time; it can be paused (pauseSchedule)`,
  );
}

/** A row as listSchedules() shows it, with its next tick after `now` (and after its last tick). */
export function toJobSchedule(row: ScheduleRow, now = new Date()): JobSchedule {
  const timing = storedTiming(row);
  const after = row.last_execution && row.last_execution > now ? row.last_execution : now;
  return {
    id: row.identifier,
    identifier: row.task_identifier,
    cron: row.every_ms === null ? row.expression : null,
    every: row.every_ms === null ? null : Number(row.every_ms),
    timeZone: row.every_ms === null ? row.time_zone : null,
    payload: row.payload ? (JSON.parse(row.payload) as Record<string, unknown>) : {},
    queueName: row.queue_name,
    priority: row.priority,
    maxAttempts: row.max_attempts,
    backfillPeriod: Number(row.backfill_ms),
    declaredInCode: row.kind !== 'runtime',
    paused: row.paused_at !== null,
    pausedAt: row.paused_at,
    lastTick: row.last_execution,
    nextTick: row.paused_at === null && timing ? timing.next(after) : null,
    knownSince: row.known_since,
    updatedAt: row.updated_at,
    registeredAt: row.registered_at,
  };
}
