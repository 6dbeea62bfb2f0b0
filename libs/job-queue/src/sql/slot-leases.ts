/**
 * Slot leases (worker/slot-leases.ts): a task limited by `globalConcurrency` alone is claimed
 * with the plain claim (sql claimJobs, one round trip, no lock) into slots each worker leases
 * beforehand, a row of `task_slots` per worker and task. A lease is granted under the task's
 * lock (sql/limits.ts lockTaskLimitOf) while every worker's lease, plus the jobs held by workers
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
     * Under the task's lock: worker $2 may run `allowed` jobs of task $1 at once, what it asks for
     * ($3) as far as the limit $4 leaves after every other worker's lease and the jobs held
     * without one; its lease row keeps `slots`, never fewer than the $5 jobs it runs (a limit
     * lowered under running jobs: it starts none until they end), and no row at 0 (a row hides
     * the worker's held jobs from the counts). Nothing for a worker whose row is gone (declared
     * dead). Returns slots and allowed.
     */
    leaseTaskSlots: `
      with room as (
        select greatest(0, least($3::int, $4::int
          - coalesce((select sum(l.slots) from ${s}.task_slots l where l.task_identifier = $1::text and l.worker_id <> $2::text), 0)
          - (${unleasedHeld(s, '$1::text', 'j.locked_by <> $2::text')})))::int as allowed
      ),
      kept as (
        select greatest($5::int, (select allowed from room)) as slots
        where exists (select 1 from ${s}.workers w where w.id = $2::text)
      ),
      dropped as (
        delete from ${s}.task_slots l where l.task_identifier = $1::text and l.worker_id = $2::text
          and coalesce((select slots from kept), 0) = 0
      ),
      granted as (
        insert into ${s}.task_slots (task_identifier, worker_id, slots)
        select $1::text, $2::text, k.slots from kept k where k.slots > 0
        on conflict (task_identifier, worker_id) do update set slots = excluded.slots
        returning slots
      )
      select coalesce((select slots from granted), 0)::int as slots,
        least((select allowed from room), coalesce((select slots from granted), 0))::int as allowed`,

    /** Worker $2 gives back its lease of task $1 down to the $3 jobs it runs, the row gone at 0 (no lock: a smaller lease never exceeds a limit). */
    shrinkTaskSlots: `
      with dropped as (delete from ${s}.task_slots where task_identifier = $1::text and worker_id = $2::text and $3::int = 0)
      update ${s}.task_slots set slots = $3::int where task_identifier = $1::text and worker_id = $2::text and slots > $3::int and $3::int > 0`,
  };
}
