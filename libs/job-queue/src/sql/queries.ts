import { jobsChannel, quoteIdentifier } from './identifier';
import { createMaintenanceQueries } from './maintenance';
import { createWorkerQueries } from './workers';

/**
 * The columns of a job row that statements return, listed rather than `*`: a prepared
 * statement whose result gains a column (a later migration adding one, while this version
 * still runs) fails with "cached plan must not change result type" on every connection
 * that prepared it.
 */
export const JOB_COLUMNS = [
  'id', 'task_identifier', 'queue_name', 'payload', 'priority', 'run_at', 'attempts', 'max_attempts',
  'last_error', 'key', 'revision', 'flags', 'locked_at', 'locked_by', 'created_at', 'updated_at', 'started_at', 'first_run_at',
] as const;

const jobColumns = (alias: string) => JOB_COLUMNS.map((column) => `${alias}.${column}`).join(', ');

/**
 * Every SQL statement the library runs at run time, in one place, named for what it does.
 * (The tables and the SQL functions themselves are created by the migrations.)
 * `$n` parameters are documented on each statement.
 */
export function createQueries(schema: string) {
  const s = quoteIdentifier(schema);
  const channel = jobsChannel(schema);

  /** Releases the queues whose jobs a CTE named `released` returned, and wakes workers for them. */
  const unlockQueuesOf = (released: string, workerParam: string) => `
    unlocked as (
      update ${s}.job_queues q set locked_at = null, locked_by = null
      where q.locked_by = ${workerParam}
        and q.queue_name in (select queue_name from ${released} where queue_name is not null)
      returning q.queue_name
    ),
    woken as (select pg_notify('${channel}', '') from unlocked limit 1)`;

  return {
    channel,

    /** $1 identifier, $2 payload (json text), $3 queue, $4 run_at, $5 max_attempts, $6 key, $7 priority, $8 flags, $9 key mode */
    addJob: `select ${jobColumns('j')} from ${s}.add_job($1::text, $2::jsonb, $3::text, $4::timestamptz, $5::integer, $6::text, $7::integer, $8::text[], $9::text) j`,

    /**
     * Many jobs without job keys in one statement: set-based, one NOTIFY.
     * $1..$7 are parallel arrays: identifiers, payloads (json text), queues, run_ats, max_attempts, priorities, flags (json text).
     */
    addJobsBulk: `
      with specs as (
        select * from unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::integer[], $6::integer[], $7::text[])
          with ordinality as s(identifier, payload, queue_name, run_at, max_attempts, priority, flags, ord)
      ),
      queues as (
        insert into ${s}.job_queues (queue_name)
        select distinct queue_name from specs where queue_name is not null
        on conflict do nothing
      ),
      inserted as (
        insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, priority, flags)
        select identifier, coalesce(payload::jsonb, '{}'::jsonb), queue_name, coalesce(run_at, now()),
               coalesce(max_attempts, 25), coalesce(priority, 0),
               coalesce(array(select jsonb_array_elements_text(flags::jsonb)), '{}')
        from specs order by ord
        returning ${JOB_COLUMNS.join(', ')}
      ),
      notified as (select pg_notify('${channel}', '') from inserted where run_at <= now() limit 1)
      select ${jobColumns('inserted')} from inserted left join notified on true order by inserted.id`,

    /** Many jobs, some with job keys: add_job per spec, in order, in one statement. Same parameters plus $8 keys, $9 key modes. */
    addJobsKeyed: `
      select ${jobColumns('j')} from unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::integer[], $6::integer[], $7::text[], $8::text[], $9::text[])
          with ordinality as s(identifier, payload, queue_name, run_at, max_attempts, priority, flags, key, key_mode, ord)
        cross join lateral ${s}.add_job(s.identifier, s.payload::jsonb, s.queue_name, s.run_at, s.max_attempts, s.key, s.priority,
          array(select jsonb_array_elements_text(s.flags::jsonb)), s.key_mode) as j
      order by s.ord`,

    /** $1 id */
    getJob: `select ${jobColumns('j')} from ${s}.jobs j where j.id = $1::bigint`,
    /** $1 job key */
    removeJob: `select ${jobColumns('j')} from ${s}.remove_job($1::text) j where j.id is not null`,
    /** $1 ids */
    completeJobs: `select ${jobColumns('j')} from ${s}.complete_jobs($1::bigint[]) j`,
    /** $1 ids, $2 reason */
    permanentlyFailJobs: `select ${jobColumns('j')} from ${s}.permanently_fail_jobs($1::bigint[], $2::text) j`,
    /** $1 ids, $2 run_at, $3 priority, $4 attempts, $5 max_attempts */
    rescheduleJobs: `select ${jobColumns('j')} from ${s}.reschedule_jobs($1::bigint[], $2::timestamptz, $3::integer, $4::integer, $5::integer) j`,

    /**
     * The claim. Up to $3 available jobs of the tasks $1 that carry none of the flags $2,
     * by priority then run_at then id, skipping rows other workers are claiming, for worker
     * $4, which must still have its row (a worker declared dead claims nothing under its old
     * id). The first $5 of them (the free slots) are marked started; the rest are prefetched.
     *
     * A job of a named queue is a candidate only as the queue's head and while no worker
     * holds the queue; the queue row is locked (created if the cleaner removed it) in the
     * same statement. The head is the first job by queue place, (priority,
     * coalesce(first_run_at, run_at), id), among the queue's available jobs that are due or
     * waiting for a retry: a head waiting for its retry keeps its queue waiting, and one
     * that failed for good no longer counts. So a queue whose head this worker may not run
     * (a forbidden flag, another app's task), or whose head another worker is claiming right
     * now, is left alone, and its other jobs never fill the candidates that work outside it
     * needs. Each row also carries how many candidates there were: fewer than $3 means
     * nothing else is waiting now. The task filter is written with array_position so that,
     * before PostgreSQL has statistics on a freshly filled table, the planner still walks
     * jobs_fetch_idx in order instead of sorting it all.
     */
    claimJobs: `
      with candidates as materialized (
        select j.id, j.queue_name, j.priority, j.run_at
        from ${s}.jobs j
        where j.is_available
          and j.run_at <= now()
          and array_position($1::text[], j.task_identifier) is not null
          and not (j.flags && $2::text[])
          and (j.queue_name is null or (
            not exists (
              select 1 from ${s}.job_queues q where q.queue_name = j.queue_name and q.locked_at is not null)
            and not exists (
              select 1 from ${s}.jobs e
              where e.queue_name = j.queue_name and e.is_available and (e.run_at <= now() or e.attempts > 0)
                and (e.priority, coalesce(e.first_run_at, e.run_at), e.id) < (j.priority, coalesce(j.first_run_at, j.run_at), j.id))))
          and exists (select 1 from ${s}.workers w where w.id = $4)
        order by j.priority, j.run_at, j.id
        limit $3
        for update of j skip locked
      ),
      ranked as (
        select id, queue_name, row_number() over (order by priority, run_at, id) as rank from candidates
      ),
      locked_queues as (
        insert into ${s}.job_queues as q (queue_name, locked_at, locked_by)
        select distinct queue_name, now(), $4 from candidates where queue_name is not null
        on conflict (queue_name) do update set locked_at = excluded.locked_at, locked_by = excluded.locked_by
        where q.locked_at is null
        returning q.queue_name
      )
      update ${s}.jobs j
      set attempts = j.attempts + 1, locked_at = now(), locked_by = $4, updated_at = now(),
          started_at = case when r.rank <= $5 then now() end
      from ranked r
      where j.id = r.id and (r.queue_name is null or r.queue_name in (select queue_name from locked_queues))
      returning ${jobColumns('j')}, (select count(*) from candidates)::int as candidate_count`,

    /**
     * One flush of the release batches for worker $1: deletes the jobs that succeeded ($2),
     * and for the ones that failed ($3 ids, $4 errors, $5 retry delays in ms) records the
     * error, unlocks them and moves run_at (keeping their queue place in first_run_at). It
     * also marks as started the prefetched jobs whose handlers began since ($6). Only rows
     * this worker still holds are touched: a job it lost (rescued after a stall, say) is
     * not its to write. A keyed job can be row-locked by a caller for as long as the
     * caller's transaction lasts (add_job replacing it while it runs): keyed rows are found
     * once (`keyed`), taken SKIP LOCKED (`held`), and those someone holds come back in `busy`
     * (keyed but not held), for a later flush, so that
     * one lock holds up one job and never the worker's others (a start mark is just
     * dropped). Keyless rows nobody locks for long: they are taken directly, which spares
     * the drain a lock record per job.
     */
    releaseJobs: `
      with keyed as materialized (
        select id from ${s}.jobs
        where id = any($2::bigint[] || $3::bigint[] || $6::bigint[]) and locked_by = $1 and key is not null
      ),
      held as materialized (
        select id from ${s}.jobs
        where id in (select id from keyed) and locked_by = $1
        for no key update skip locked
      ),
      completed as (
        delete from ${s}.jobs j
        where j.id = any($2::bigint[]) and j.locked_by = $1 and (j.key is null or j.id in (select id from held))
        returning j.queue_name
      ),
      failed as (
        update ${s}.jobs j set
          last_error = f.error,
          first_run_at = coalesce(j.first_run_at, j.run_at),
          run_at = now() + f.delay_ms * interval '1 millisecond',
          locked_at = null, locked_by = null, updated_at = now()
        from unnest($3::bigint[], $4::text[], $5::float8[]) as f(id, error, delay_ms)
        where j.id = f.id and j.locked_by = $1 and (j.key is null or j.id in (select id from held))
        returning j.queue_name
      ),
      started as (
        update ${s}.jobs j set started_at = now()
        where j.id = any($6::bigint[]) and j.locked_by = $1 and j.started_at is null and (j.key is null or j.id in (select id from held))
      ),
      released as (select queue_name from completed union all select queue_name from failed),
      ${unlockQueuesOf('released', '$1')},
      busy as (
        select id from keyed where id = any($2::bigint[] || $3::bigint[]) and id not in (select id from held)
      )
      select (select count(*) from released)::int as released, (select count(*) from woken)::int as woken,
             array(select id::text from busy) as busy`,

    /** Records schedules seen for the first time: backfill never reaches before known_since. $1 identifiers */
    registerCrontabs: `
      insert into ${s}.known_crontabs (identifier, known_since)
      select unnest($1::text[]), now()
      on conflict (identifier) do nothing`,

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

    ...createWorkerQueries(s, channel),
    ...createMaintenanceQueries(s, channel),
  };
}

export type JobQueueQueries = ReturnType<typeof createQueries>;
