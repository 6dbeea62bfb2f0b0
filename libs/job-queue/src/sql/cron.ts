/**
 * Recurring jobs (cron/): the schedules kept in known_crontabs, and each tick's job added once
 * across all replicas. A tick enters the data path (add → row + NOTIFY → claim → run →
 * release) at its first step: scheduleCronTick adds its job through add_job().
 *
 * A row is a schedule's whole definition (migration Schedules1764700000000): declared in code
 * (`kind` 'code', written by every replica that declares it when it starts: the latest start
 * wins) or at run time (`kind` 'runtime', upsertSchedule). Every replica ticks what the row
 * says, never its own copy. `revision` counts changes of the definition. `s` is the quoted schema.
 */

/** A schedule's columns, as loadSchedules and the admin statements return them. */
const SCHEDULE_COLUMNS = `identifier, kind, task_identifier, expression, every_ms::text as every_ms, time_zone, payload::text as payload,
  queue_name, priority, max_attempts, coalesce(backfill_ms, 0)::text as backfill_ms, paused_at, resumed_at, revision::text as revision,
  updated_at, known_since, last_execution, registered_at`;

/** The definition's columns, compared to decide whether a write changed it (and so bumps `revision`). */
const DEFINITION = (t: string) =>
  `(${['kind', 'task_identifier', 'expression', 'every_ms', 'time_zone', 'payload', 'queue_name', 'priority', 'max_attempts', 'backfill_ms'].map((c) => `${t}.${c}`).join(', ')})`;

export function createCronQueries(s: string) {
  /** Bumps `revision` and `updated_at` only when the definition changed. */
  const changed = `${DEFINITION('k')} is distinct from ${DEFINITION('excluded')}`;
  const setDefinition = `kind = excluded.kind, task_identifier = excluded.task_identifier, expression = excluded.expression,
        every_ms = excluded.every_ms, time_zone = excluded.time_zone, payload = excluded.payload, queue_name = excluded.queue_name,
        priority = excluded.priority, max_attempts = excluded.max_attempts, backfill_ms = excluded.backfill_ms,
        registered_at = excluded.registered_at,
        revision = k.revision + case when ${changed} then 1 else 0 end,
        updated_at = case when ${changed} then now() else k.updated_at end`;
  return {
    /**
     * Writes the schedules this process declares in code, as it declares them (the latest
     * replica to start wins; a run-time schedule of the same id becomes this declaration).
     * known_since is set once, when a schedule is first seen (backfill never reaches before it).
     * $1 identifiers, $2 tasks, $3 expressions, $4 time zones, $5 payloads (json text),
     * $6 queues, $7 priorities, $8 max attempts, $9 backfill periods (ms).
     */
    registerCrontabs: `
      insert into ${s}.known_crontabs as k (identifier, known_since, kind, task_identifier, expression, every_ms, time_zone, payload,
        queue_name, priority, max_attempts, backfill_ms, registered_at, revision, updated_at)
      select identifier, now(), 'code', task, expression, null, time_zone, payload::jsonb, queue_name, priority, max_attempts, backfill_ms, now(), 1, now()
      from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::integer[], $8::integer[], $9::bigint[])
        as c(identifier, task, expression, time_zone, payload, queue_name, priority, max_attempts, backfill_ms)
      on conflict (identifier) do update set ${setDefinition}`,

    /** The schedules this process ticks: every run-time one, and those of $1 (the ids it declares in code). */
    loadSchedules: `select ${SCHEDULE_COLUMNS} from ${s}.known_crontabs where kind = 'runtime' or identifier = any($1::text[])`,

    /** Every schedule, declared or given at run time, by id (listSchedules, the dashboard). */
    listSchedules: `select ${SCHEDULE_COLUMNS} from ${s}.known_crontabs order by identifier`,

    /** Locks a schedule's row for its backfill, so that no replica's live tick overtakes it. $1 identifier */
    lockCrontab: `select ${SCHEDULE_COLUMNS} from ${s}.known_crontabs where identifier = $1 for update`,

    /**
     * One cron tick, once across all replicas: claims tick $2 of schedule $1 (only if it is
     * later than the last one claimed, the schedule is not paused, the tick is after its last
     * resume, and the definition is still revision $9, the one the tick was computed from) and,
     * in the same statement, adds its job with a job key per schedule and tick. $3 task,
     * $4 payload (json text), $5 queue, $6 max_attempts, $7 job key, $8 priority. Returns the
     * job, or nothing if the tick was not this caller's to add. Never inserts the row: a
     * schedule removed at run time stays removed. (Workers of earlier versions run their own
     * statement, which inserts it and knows no pause nor revision.)
     */
    scheduleCronTick: `
      with claimed as (
        update ${s}.known_crontabs k set last_execution = $2::timestamptz
        where k.identifier = $1 and (k.last_execution is null or k.last_execution < $2::timestamptz)
          and k.paused_at is null and (k.resumed_at is null or k.resumed_at < $2::timestamptz) and k.revision = $9::bigint
        returning k.identifier
      )
      select j.id from claimed
        cross join lateral ${s}.add_job($3::text, $4::jsonb, $5::text, $2::timestamptz, $6::integer, $7::text, $8::integer, null, 'unsafe_dedupe') as j`,

    /**
     * Creates or changes run-time schedule $1 (never one declared in code: then no row is
     * returned). $2 task, $3 expression, $4 every (ms), $5 time zone, $6 payload (json text),
     * $7 queue, $8 priority, $9 backfill period (ms).
     */
    upsertSchedule: `
      insert into ${s}.known_crontabs as k (identifier, known_since, kind, task_identifier, expression, every_ms, time_zone, payload,
        queue_name, priority, max_attempts, backfill_ms, registered_at, revision, updated_at)
      values ($1, now(), 'runtime', $2, $3, $4::bigint, $5, $6::jsonb, $7, $8::integer, null, $9::bigint, now(), 1, now())
      on conflict (identifier) do update set ${setDefinition}
        where k.kind = 'runtime'
      returning ${SCHEDULE_COLUMNS}`,

    /** Removes run-time schedule $1: `removed` 1 or 0, and `kind` of the row if one is left (a schedule declared in code). */
    removeSchedule: `
      with gone as (delete from ${s}.known_crontabs where identifier = $1 and kind = 'runtime' returning identifier)
      select (select count(*) from gone)::int as removed, (select kind from ${s}.known_crontabs where identifier = $1 and kind <> 'runtime') as kind`,

    /** Pauses schedule $1 (a paused one stays paused since its first pause). Returns it, or nothing. */
    pauseSchedule: `
      update ${s}.known_crontabs set paused_at = coalesce(paused_at, now()) where identifier = $1
      returning ${SCHEDULE_COLUMNS}`,

    /** Resumes schedule $1: the ticks of its pause are never added (resumed_at). Returns it, or nothing. */
    resumeSchedule: `
      update ${s}.known_crontabs set resumed_at = case when paused_at is null then resumed_at else now() end, paused_at = null
      where identifier = $1
      returning ${SCHEDULE_COLUMNS}`,
  };
}

/** A row of the statements above that return schedules. */
export interface ScheduleRow {
  identifier: string;
  kind: 'code' | 'runtime';
  task_identifier: string | null;
  expression: string | null;
  every_ms: string | null;
  time_zone: string | null;
  payload: string | null;
  queue_name: string | null;
  priority: number | null;
  max_attempts: number | null;
  backfill_ms: string;
  paused_at: Date | null;
  resumed_at: Date | null;
  revision: string;
  updated_at: Date | null;
  known_since: Date;
  last_execution: Date | null;
  registered_at: Date | null;
}
