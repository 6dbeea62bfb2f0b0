import { storedTiming } from '../core/schedule';
import type { ScheduleRow } from '../sql/cron';
import type { CronItem } from './cron-item';

/** A schedule as its row says, which is what every replica ticks: its item, revision and pause. */
export interface StoredSchedule {
  item: CronItem;
  /** The definition's revision: a tick is claimed only under it (scheduleCronTick). */
  revision: string;
  paused: boolean;
  /** Ticks up to this instant are never added (the last resume). */
  resumedAt: Date | null;
  /** When the definition last changed; ticks before it belong to the old one. */
  updatedAt: Date | null;
  lastExecution: Date | null;
  knownSince: Date;
  /** Equal for two readings of an unchanged definition. */
  signature: string;
}

/** The schedule a row says, or null for one this version cannot tick (no task, or an expression it cannot read). */
export function storedSchedule(row: ScheduleRow): StoredSchedule | null {
  const timing = storedTiming(row);
  if (!timing || !row.task_identifier) return null;
  const payload = row.payload ? (JSON.parse(row.payload) as Record<string, unknown>) : {};
  const item: CronItem = {
    identifier: row.identifier,
    task: row.task_identifier,
    expression: timing.expression,
    timeZone: timing.timeZone,
    everyMs: timing.everyMs,
    payload: payload && typeof payload === 'object' && !Array.isArray(payload) ? payload : {},
    queueName: row.queue_name ?? undefined,
    priority: row.priority ?? undefined,
    maxAttempts: row.max_attempts ?? undefined,
    backfillMs: Number(row.backfill_ms),
    source: row.kind === 'runtime' ? 'upsertSchedule' : 'declared in code',
    next: timing.next,
  };
  const signature = JSON.stringify([row.revision, row.kind, row.task_identifier, row.expression, row.every_ms, row.time_zone, row.payload, row.queue_name, row.priority, row.max_attempts, row.backfill_ms]);
  return {
    item,
    revision: row.revision,
    paused: row.paused_at !== null,
    resumedAt: row.resumed_at,
    updatedAt: row.updated_at,
    lastExecution: row.last_execution,
    knownSince: row.known_since,
    signature,
  };
}

const latest = (...dates: Array<Date | null | undefined>): Date => new Date(Math.max(...dates.map((date) => date?.getTime() ?? 0)));

/**
 * Where this process's cursor (the last tick it handled) of a schedule goes after a reading of
 * the table: a schedule it did not tick before starts after its last tick, its last change and
 * its last resume, at the latest now minus nothing owed (ticksDue adds what is due since); a
 * changed definition starts after the change; a resumed one after the resume; a paused one
 * follows the clock, so that nothing of its pause is owed when it resumes.
 */
export function nextCursor(before: { cursor: Date; schedule: StoredSchedule } | undefined, schedule: StoredSchedule, now: Date): Date {
  if (schedule.paused) return now;
  if (!before) return latest(schedule.lastExecution, schedule.updatedAt ?? schedule.knownSince, schedule.resumedAt);
  if (before.schedule.signature !== schedule.signature) return latest(before.cursor, schedule.updatedAt, schedule.resumedAt);
  return latest(before.cursor, schedule.resumedAt);
}
