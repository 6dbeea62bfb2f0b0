/**
 * Slot leases (worker/slot-leases.ts): a task limited by `globalConcurrency` alone is claimed
 * with the plain claim (sql claimJobs, one round trip, no lock) into slots each worker leases
 * beforehand, a row of `task_slots` per worker and task. A lease is granted under the task's
 * lock (sql/limits.ts lockTaskLimit) while every worker's lease, plus the jobs held by workers
 * that have none (workers of earlier releases, claims counted by sql countTaskSlots), stays
 * within the limit; a worker holds at most its lease of the task's jobs. So no more than the
 * limit run at once, and a claim pays no lock. A dead worker's lease goes with its row at the
 * rescue (on delete cascade), as its jobs do. `s` is the quoted schema.
 */

/** How many jobs of task `task` are held (locked by a worker) by workers with no lease of it, and for which `also` holds (`j`: the job). */
export const unleasedHeld = (s: string, task: string, also: string) => `
  select count(*) from ${s}.jobs j
  where j.locked_by is not null and j.task_identifier = ${task} and ${also}
    and not exists (select 1 from ${s}.task_slots l where l.task_identifier = ${task} and l.worker_id = j.locked_by)`;

export function createSlotLeaseQueries(s: string) {
  return {
    /**
     * Under the task's lock: worker $2's lease of task $1 becomes what it asks for ($3 slots) as
     * far as the limit $4 allows after every other worker's lease and the jobs held without one,
     * and never less than the $5 jobs of the task it holds (after a limit was lowered: it then
     * claims none until they end). Nothing for a worker whose row is gone (declared dead).
     * Returns the lease granted.
     */
    leaseTaskSlots: `
      with room as (
        select $4::int - coalesce((select sum(l.slots) from ${s}.task_slots l where l.task_identifier = $1::text and l.worker_id <> $2::text), 0)
               - (${unleasedHeld(s, '$1::text', 'j.locked_by <> $2::text')}) as free
      ),
      granted as (
        insert into ${s}.task_slots (task_identifier, worker_id, slots)
        select $1::text, $2::text, greatest($5::int, least($3::int, (select free from room)::int), 0)
        where exists (select 1 from ${s}.workers w where w.id = $2::text)
        on conflict (task_identifier, worker_id) do update set slots = excluded.slots
        returning slots
      )
      select coalesce((select slots from granted), 0)::int as slots`,

    /** Worker $2 gives back its lease of task $1 down to the $3 jobs it holds (no lock: a smaller lease never exceeds a limit). */
    shrinkTaskSlots: `update ${s}.task_slots set slots = $3::int where task_identifier = $1::text and worker_id = $2::text and slots > $3::int`,
  };
}
