/**
 * Pause and resume (migration Pauses1764600000000, control/): the `pauses` table, one row per
 * paused task ('*' for all) or named queue. A row with an `until` (migration
 * TaskLimits1764800000000) is a hold: a task `ctx.rateLimited()` paused until then. Changing it
 * tells every worker on the jobs channel (payload CONTROLS_CHANGED) in the same statement, so
 * they hear it only once it commits; workers read it again then and at each poll, and keep it
 * in memory for their claims (sql/claim.ts $1, $6). `s` is the quoted schema, `channel` the
 * jobs channel.
 */

import { quoteLiteral } from './identifier';

/**
 * The payload on the jobs channel that tells workers the controls changed: the pauses, or the
 * task limits set at run time (sql/limits.ts). 'paused' since the first release with pauses,
 * whose workers read their pauses again when they hear it.
 */
export const CONTROLS_CHANGED = 'paused';

/** The notification that the controls changed, as a select for a statement's CTE. */
export const tellControlsChanged = (channel: string) => `select pg_notify(${quoteLiteral(channel)}, ${quoteLiteral(CONTROLS_CHANGED)})`;

/** Row `p` of `pauses` is in force (a hold whose `until` has passed is not). */
const inForce = (p: string) => `(${p}.until is null or ${p}.until > now())`;

/**
 * "Job `j` (task_identifier, queue_name) is not paused": for the statements that count what
 * nobody runs (sql/operations.ts), never for the claim, which gets the pauses as parameters.
 */
export const notPaused = (j: string, s: string) =>
  `not exists (select 1 from ${s}.pauses p where ((p.kind = 'task' and p.name in (${j}.task_identifier, '*')) or (p.kind = 'queue' and p.name = ${j}.queue_name)) and ${inForce('p')})`;

export function createPauseQueries(s: string, channel: string) {
  const tell = tellControlsChanged(channel);
  return {
    /** $1 kind ('task' | 'queue'), $2 name: pauses it until resumed (a hold becomes such a pause; a pause already there keeps its time), and tells the workers. */
    pause: `
      with added as (
        insert into ${s}.pauses (kind, name) values ($1, $2)
        on conflict (kind, name) do update set until = null where ${s}.pauses.until is not null
        returning 1
      ),
      told as (${tell})
      select (select count(*) from added)::int as added, (select count(*) from told)::int as told`,

    /** $1 kind, $2 name: resumes it, a hold included (nothing if it was not paused), and tells the workers. */
    resume: `
      with gone as (delete from ${s}.pauses where kind = $1 and name = $2 returning 1),
      told as (${tell})
      select (select count(*) from gone)::int as resumed, (select count(*) from told)::int as told`,

    /**
     * $1 task, $2 ms: holds the task's starts until $2 ms from now (ctx.rateLimited), on every
     * worker. A later hold already there stays; a pause with no end stays one.
     */
    holdTask: `
      with held as (
        insert into ${s}.pauses (kind, name, until) values ('task', $1, now() + $2::bigint * interval '1 millisecond')
        on conflict (kind, name) do update
          set until = excluded.until, paused_at = case when ${s}.pauses.until <= now() then now() else ${s}.pauses.paused_at end
          where ${s}.pauses.until is not null and ${s}.pauses.until < excluded.until
        returning 1
      ),
      told as (${tell})
      select (select count(*) from held)::int as held, (select count(*) from told)::int as told`,

    /** Deletes the holds that are over and tells the workers if there were any (for workers of releases that read a hold as a pause with no end). */
    deleteEndedHolds: `
      with gone as (delete from ${s}.pauses where until <= now() returning 1),
      told as (${tell} where exists (select 1 from gone))
      select (select count(*) from gone)::int as deleted, (select count(*) from told)::int as told`,

    /**
     * What is paused now, tasks first, by name; a hold with its end (`until`) and how many ms
     * away it is by the server's clock (`until_ms`), which workers count on their own clock.
     */
    listPaused: `
      select kind, name, paused_at, until, (extract(epoch from (until - now())) * 1000)::float8 as until_ms
      from ${s}.pauses p where ${inForce('p')} order by kind desc, name`,
  };
}
