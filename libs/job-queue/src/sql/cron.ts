/**
 * Recurring jobs (cron/): the schedules a process declares, and each tick's job added once
 * across all replicas. A tick enters the data path (add → row + NOTIFY → claim → run →
 * release) at its first step: scheduleCronTick adds its job through add_job().
 * `s` is the quoted schema.
 */

export function createCronQueries(s: string) {
  return {
    /**
     * Records this process's schedules: known_since once, when a schedule is first seen
     * (backfill never reaches before it); the task, expression and time zone as this process
     * declares them, for the dashboard. $1 identifiers, $2 tasks, $3 expressions, $4 time zones.
     */
    registerCrontabs: `
      insert into ${s}.known_crontabs as k (identifier, known_since, task_identifier, expression, time_zone, registered_at)
      select identifier, now(), task, expression, time_zone, now()
      from unnest($1::text[], $2::text[], $3::text[], $4::text[]) as c(identifier, task, expression, time_zone)
      on conflict (identifier) do update set task_identifier = excluded.task_identifier, expression = excluded.expression,
        time_zone = excluded.time_zone, registered_at = excluded.registered_at`,

    /** Locks a schedule's row for its backfill, so that no replica's live tick overtakes it. $1 identifier */
    lockCrontab: `select known_since, last_execution from ${s}.known_crontabs where identifier = $1 for update`,

    /**
     * One cron tick, once across all replicas: claims tick $2 of schedule $1 (only if it
     * is later than the last one claimed) and, in the same statement, adds its job with a
     * job key per schedule and tick. $3 task, $4 payload (json text), $5 queue,
     * $6 max_attempts, $7 job key, $8 priority. Returns the job, or nothing if the tick
     * was already claimed.
     */
    scheduleCronTick: `
      with claimed as (
        insert into ${s}.known_crontabs as k (identifier, known_since, last_execution)
        values ($1, now(), $2::timestamptz)
        on conflict (identifier) do update set last_execution = excluded.last_execution
        where k.last_execution is null or k.last_execution < excluded.last_execution
        returning k.identifier
      )
      select j.id from claimed
        cross join lateral ${s}.add_job($3::text, $4::jsonb, $5::text, $2::timestamptz, $6::integer, $7::text, $8::integer, null, 'unsafe_dedupe') as j`,
  };
}
