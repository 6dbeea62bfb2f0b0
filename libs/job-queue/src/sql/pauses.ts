/**
 * Pause and resume (migration Pauses1764600000000, control/): the `pauses` table, one row per
 * paused task ('*' for all) or named queue. Changing it tells every worker on the jobs channel
 * (payload `paused`) in the same statement, so they hear it only once it commits; workers read
 * it again then and at each poll, and keep it in memory for their claims (sql/claim.ts $1, $6).
 * `s` is the quoted schema, `channel` the jobs channel.
 */

/** The payload on the jobs channel that tells workers the pauses changed. */
export const PAUSES_CHANGED = 'paused';

/**
 * "Job `j` (task_identifier, queue_name) is not paused": for the statements that count what
 * nobody runs (sql/operations.ts), never for the claim, which gets the pauses as parameters.
 */
export const notPaused = (j: string, s: string) =>
  `not exists (select 1 from ${s}.pauses p where (p.kind = 'task' and p.name in (${j}.task_identifier, '*')) or (p.kind = 'queue' and p.name = ${j}.queue_name))`;

export function createPauseQueries(s: string, channel: string) {
  const tell = `select pg_notify('${channel.replace(/'/g, "''")}', '${PAUSES_CHANGED}')`;
  return {
    /** $1 kind ('task' | 'queue'), $2 name: pauses it (a pause already there keeps its time), and tells the workers. */
    pause: `
      with added as (insert into ${s}.pauses (kind, name) values ($1, $2) on conflict (kind, name) do nothing returning 1),
      told as (${tell})
      select (select count(*) from added)::int as added, (select count(*) from told)::int as told`,

    /** $1 kind, $2 name: resumes it (nothing if it was not paused), and tells the workers. */
    resume: `
      with gone as (delete from ${s}.pauses where kind = $1 and name = $2 returning 1),
      told as (${tell})
      select (select count(*) from gone)::int as resumed, (select count(*) from told)::int as told`,

    /** Everything paused, tasks first, by name. */
    listPaused: `select kind, name, paused_at from ${s}.pauses order by kind desc, name`,
  };
}
