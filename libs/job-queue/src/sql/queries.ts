import { cancelChannel, finishedChannel, jobsChannel, quoteIdentifier } from './identifier';
import { cancelledError, createLifecycleQueries, keepFinished, tellFinished, withError } from './lifecycle';
import { createMaintenanceQueries } from './maintenance';
import { createOperationsQueries } from './operations';
import { queueHead } from './queue-head';
import { createWorkerQueries } from './workers';
import { epochMicroseconds } from './epoch-microseconds';

/**
 * The columns of a job row that statements return, listed rather than `*`: a prepared
 * statement whose result gains a column (a later migration adding one, while this version
 * still runs) fails with "cached plan must not change result type" on every connection
 * that prepared it.
 */
export const JOB_COLUMNS = [
  'id', 'task_identifier', 'queue_name', 'payload', 'priority', 'run_at', 'attempts', 'max_attempts',
  'last_error', 'key', 'revision', 'flags', 'locked_at', 'locked_by', 'created_at', 'updated_at', 'started_at', 'first_run_at',
  'progress', 'errors', 'cancel_requested_at', 'trace_id', 'span_id', 'trace_flags',
] as const;

const jobColumns = (alias: string) => JOB_COLUMNS.map((column) => `${alias}.${column}`).join(', ');

/**
 * The columns a job without a key is inserted with, and their values from addJobKeyless's
 * parameters ($1..$10), the table's defaults for what the caller left out: shared by
 * addJobKeyless and addJobStarted.
 */
const KEYLESS_COLUMNS = 'task_identifier, payload, queue_name, run_at, max_attempts, priority, flags, trace_id, span_id, trace_flags';
const KEYLESS_VALUES = `$1::text, coalesce($2::jsonb, '{}'::jsonb), $3::text, coalesce($4::timestamptz, now()), coalesce($5::integer, 25),
                coalesce($6::integer, 0), coalesce($7::text[], '{}'), $8::uuid, $9::bigint, $10::smallint`;

/** An add's new row's times (service/added-jobs.ts), from a CTE named `inserted`: whole epoch microseconds (sql/epoch-microseconds.ts). */
const ADDED_TIMES = `${epochMicroseconds('inserted.run_at')} as run_at_us, ${epochMicroseconds('inserted.created_at')} as created_at_us`;

/**
 * What the claim returns of each job (worker/claimed-job.ts makes the Job): only what the
 * worker does not know already, in the forms cheapest to read. Times are whole epoch
 * microseconds (sql/epoch-microseconds.ts), the claim's own times (locked_at,
 * updated_at, a started_at it set) are one `claimed_at_us`, flags are null when empty;
 * locked_by is the worker, and cancel_requested_at is null (the claim skips cancelled jobs).
 * Reading the 24 columns of a job row took Node 10 µs a job, half of all the JavaScript a
 * trivial job costs.
 */
const CLAIMED_COLUMNS = `j.id, j.task_identifier, j.queue_name, j.payload, j.priority, j.attempts, j.max_attempts, j.last_error, j.key,
  j.revision, nullif(j.flags, '{}') as flags, j.progress, j.errors, j.trace_id, j.span_id, j.trace_flags,
  ${epochMicroseconds('j.run_at')} as run_at_us, ${epochMicroseconds('j.created_at')} as created_at_us,
  ${epochMicroseconds('now()')} as claimed_at_us, j.started_at is not null as started`;

/**
 * "Row `j` is held by worker `worker`", written so that no index can serve it
 * (`is not distinct from` is not indexable): a statement that names its rows by id then
 * reaches them by primary key whatever its plan. Prepared releaseJobs once took its rows
 * from jobs_locked_by_idx in a generic plan and walked all the worker held once per id.
 */
const heldBy = (j: string, worker: string) => `${j}.locked_by is not distinct from ${worker}::text`;

/**
 * How many queued jobs, per job asked for, the claim looks at in fetch order for its queues'
 * heads before it looks up each queue's head instead (see claimJobs).
 */
const QUEUED_WALK_FACTOR = 2;

/** No worker holds queue `queue`. */
const queueFree = (queue: string, s: string) => `not exists (select 1 from ${s}.job_queues q where q.queue_name = ${queue} and q.locked_at is not null)`;

/** Row `j` is a job of the claim's tasks ($1) carrying none of its forbidden flags ($2). */
const claimable = (j: string) => `array_position($1::text[], ${j}.task_identifier) is not null and not (${j}.flags && $2::text[])`;

/** A queue head `h` this claim may take: claimable, its queue not held by a worker (a head has no cancel asked for: queueHead). */
const claimableHead = (h: string, s: string) => `${claimable(h)} and ${queueFree(`${h}.queue_name`, s)}`;

/** A field of the failure releaseJobs was given for row `j` ($5, by id), as text. */
const failure = (j: string, field: 'message' | 'code' | 'delay_ms') => `($5::jsonb -> ${j}.id::text ->> '${field}')`;

/**
 * Every SQL statement the library runs at run time, in one place, named for what it does.
 * (The tables and the SQL functions themselves are created by the migrations.)
 * `$n` parameters are documented on each statement.
 */
export function createQueries(schema: string) {
  const s = quoteIdentifier(schema);
  const channel = jobsChannel(schema);
  const finished = finishedChannel(schema);

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
    finishedChannel: finished,
    cancelChannel: cancelChannel(schema),

    /** $1 identifier, $2 payload (json text), $3 queue, $4 run_at, $5 max_attempts, $6 key, $7 priority, $8 flags, $9 key mode */
    addJob: `select ${jobColumns('j')} from ${s}.add_job($1::text, $2::jsonb, $3::text, $4::timestamptz, $5::integer, $6::text, $7::integer, $8::text[], $9::text) j`,
    /**
     * A job without a job key, as add_job() would add it, in plain SQL: no function call
     * (plpgsql costs about a sixth of the round trip), and only what the database decides
     * comes back (service/added-jobs.ts). $1 identifier, $2 payload (json text), $3 queue,
     * $4 run_at, $5 max_attempts, $6 priority, $7 flags, $8 $9 $10 the trace id, span id and
     * trace flags of the span that adds it, or nulls.
     */
    addJobKeyless: `
      with queue as (
        insert into ${s}.job_queues (queue_name) select $3::text where $3::text is not null on conflict do nothing
      ),
      inserted as (
        insert into ${s}.jobs (${KEYLESS_COLUMNS})
        values (${KEYLESS_VALUES})
        returning id, run_at, created_at
      ),
      notified as (select pg_notify('${channel}', '') from inserted where run_at <= now())
      select inserted.id, ${ADDED_TIMES} from inserted left join notified on true`,
    /**
     * addJobKeyless for a due job of no named queue that a worker of the adding process has
     * kept a free slot for (service/local-start.ts): inserted already claimed by worker $11,
     * attempt 1 started, as claimJobs would leave it, and without a NOTIFY, so that no other
     * worker looks for it. If $11 has no row (the cluster declared it dead) or the job is not
     * due, it is added as addJobKeyless adds it, NOTIFY included (`locked_by` null).
     * $1..$10 are addJobKeyless's ($3 null: no named queue), $11 the worker's id.
     */
    addJobStarted: `
      with claimer as (
        select exists (select 1 from ${s}.workers w where w.id = $11::text) and coalesce($4::timestamptz, now()) <= now() as takes
      ),
      inserted as (
        insert into ${s}.jobs (${KEYLESS_COLUMNS}, attempts, locked_at, locked_by, started_at)
        select ${KEYLESS_VALUES},
               case when c.takes then 1 else 0 end, case when c.takes then now() end,
               case when c.takes then $11::text end, case when c.takes then now() end
        from claimer c
        returning id, run_at, created_at, locked_by
      ),
      notified as (select pg_notify('${channel}', '') from inserted where locked_by is null and run_at <= now())
      select inserted.id, ${ADDED_TIMES}, inserted.locked_by from inserted left join notified on true`,
    /** addJob with $10 trace id, $11 span id, $12 trace flags of the span that adds it (telemetry/trace-context.ts): only when telemetry has one. */
    addJobTraced: `select ${jobColumns('j')} from ${s}.add_job_traced($1::text, $2::jsonb, $3::text, $4::timestamptz, $5::integer, $6::text, $7::integer, $8::text[], $9::text, $10::uuid, $11::bigint, $12::smallint) j`,

    /**
     * Many jobs without job keys in one statement: set-based, one NOTIFY.
     * $1..$7 are parallel arrays: identifiers, payloads (json text), queues, run_ats, max_attempts, priorities, flags (json text);
     * $8, $9, $10 the trace id, span id and trace flags of the span that adds them, or nulls.
     * Returns only what the database decides (id, run_at_us, created_at_us), in the order given: the
     * rest of each new row is what the caller sent (service/added-jobs.ts), and sending it back
     * would cost more than the insert.
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
        insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, priority, flags, trace_id, span_id, trace_flags)
        select identifier, coalesce(payload::jsonb, '{}'::jsonb), queue_name, coalesce(run_at, now()),
               coalesce(max_attempts, 25), coalesce(priority, 0),
               case when flags is null then '{}'::text[] else array(select jsonb_array_elements_text(flags::jsonb)) end, $8::uuid, $9::bigint, $10::smallint
        from specs order by ord
        returning id, run_at, created_at
      ),
      notified as (select pg_notify('${channel}', '') from inserted where run_at <= now() limit 1)
      select inserted.id, ${ADDED_TIMES} from inserted left join notified on true order by inserted.id`,

    /** Many jobs, some with job keys: add_job per spec, in order, in one statement. The parameters of addJobsBulk but its trace, plus $8 keys, $9 key modes. */
    addJobsKeyed: `
      select ${jobColumns('j')} from unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::integer[], $6::integer[], $7::text[], $8::text[], $9::text[])
          with ordinality as s(identifier, payload, queue_name, run_at, max_attempts, priority, flags, key, key_mode, ord)
        cross join lateral ${s}.add_job(s.identifier, s.payload::jsonb, s.queue_name, s.run_at, s.max_attempts, s.key, s.priority,
          array(select jsonb_array_elements_text(s.flags::jsonb)), s.key_mode) as j
      order by s.ord`,
    /** addJobsKeyed with $10, $11, $12 the trace id, span id and trace flags of the span that adds them. */
    addJobsKeyedTraced: `
      select ${jobColumns('j')} from unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::integer[], $6::integer[], $7::text[], $8::text[], $9::text[])
          with ordinality as s(identifier, payload, queue_name, run_at, max_attempts, priority, flags, key, key_mode, ord)
        cross join lateral ${s}.add_job_traced(s.identifier, s.payload::jsonb, s.queue_name, s.run_at, s.max_attempts, s.key, s.priority,
          array(select jsonb_array_elements_text(s.flags::jsonb)), s.key_mode, $10::uuid, $11::bigint, $12::smallint) as j
      order by s.ord`,

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
     * needs. Each row (CLAIMED_COLUMNS) also carries how many candidates there were: fewer
     * than $3 means nothing else is waiting now.
     *
     * Unqueued jobs and queue heads are found apart, so that no claim walks a queue's backlog:
     * - `unqueued`: the first $3 of jobs_fetch_unqueued_idx, locked as walked (SKIP LOCKED: the
     *   walk goes past whatever claims beside it are taking, and each row's lock rechecks all of
     *   its conditions on the row's latest version).
     * - `walked`, `walked_heads`: the first QUEUED_WALK_FACTOR × $3 queued jobs of
     *   jobs_fetch_queued_idx, read without locks; the first of each queue by queue place is
     *   its head if the queue's head lookup (queueHead) says so. Heads of free queues are
     *   usually near the front, so this finds them for a few index probes.
     * - `queue_names`, `enumerated_heads`: only when the walk was full and found fewer than $3
     *   heads (its queued jobs were mostly behind held or waiting heads), every queue with an
     *   available job is visited by a skip scan of jobs_queue_order_idx, and its head looked
     *   up. That costs a few microseconds per queue, where walking a held queue's backlog cost
     *   a few per job (160 ms a claim behind a queue of 100,000 jobs).
     * - `heads`: the first QUEUED_WALK_FACTOR × $3 heads by fetch order, with the row version
     *   (xmin) this statement's snapshot saw; the slack replaces heads a claim beside this one
     *   is taking.
     * - `queued`: those heads ahead of the last unqueued job locked (all of them if fewer than
     *   $3 were), locked one by one in fetch order by id and version until $3 are: a head
     *   another claim is taking is skipped (and its queue with it: the next job of that queue
     *   is no head), and so is a head whose version changed since the snapshot. Under READ
     *   COMMITTED the lock would return the new version, rechecked only against the lock's own
     *   conditions, so a head chosen for its old task, flags, run_at, queue or place (a
     *   concurrent add_job replacing a keyed job, a release, reschedule_jobs) would be claimed
     *   for its new ones.
     * - `candidates`: the first $3 of both. The unqueued jobs locked and not taken (at most $3)
     *   stay locked to the end of this statement; a claim beside it walks past them.
     * A walked job is a head only if it is the head: every walked job is due, so a head that
     * waits for its retry, not walked, is still found by queueHead and blocks its queue.
     *
     * The update finds its rows by `id = any(array)`, a primary-key lookup per id whatever the
     * statistics say. Joined to the candidates instead, it was planned from the statistics,
     * and after a vacuum of a nearly empty table (reltuples 0) the planner took jobs for empty
     * and walked the whole table once per candidate: 1.5-3 s a claim of 250 among 15,000 jobs.
     *
     * It runs on a connection of its own with CLAIM_SESSION_SETTINGS (worker/claim-connection.ts):
     * its commit does not wait for the disk, and its plan walks the fetch indexes in order and
     * stops at the limit, whatever the table's statistics say (without them, as on a table
     * just filled, the planner would read and sort every due job at each claim).
     */
    claimJobs: `
      with recursive walked as (
        select j.id, j.xmin as version, j.queue_name, j.priority, j.run_at, j.first_run_at, j.task_identifier, j.flags
        from ${s}.jobs j
        where j.is_available and j.queue_name is not null and j.run_at <= now() and j.cancel_requested_at is null
        order by j.priority, j.run_at, j.id
        limit ${QUEUED_WALK_FACTOR} * $3::int
      ),
      walked_heads as (
        select h.id, h.version, h.priority, h.run_at
        from (
          select w.*, row_number() over (partition by w.queue_name order by w.priority, coalesce(w.first_run_at, w.run_at), w.id) as place
          from walked w
          order by w.priority, w.run_at, w.id
          offset 0
        ) h
        where h.place = 1 and ${claimableHead('h', s)}
          and h.id = (${queueHead('h.queue_name', s)})
      ),
      enumerate as (
        select (select count(*) from walked_heads) < $3 and (select count(*) from walked) = ${QUEUED_WALK_FACTOR} * $3::int as needed
      ),
      queue_names as (
        (select j.queue_name from ${s}.jobs j
         where (select needed from enumerate) and j.is_available and j.queue_name is not null
         order by j.queue_name limit 1)
        union all
        select (select j.queue_name from ${s}.jobs j
                where j.is_available and j.queue_name > n.queue_name order by j.queue_name limit 1)
        from queue_names n where n.queue_name is not null
      ),
      enumerated_heads as (
        select h.id, h.version, h.priority, h.run_at
        from (
          select n.queue_name from queue_names n
          where n.queue_name is not null and ${queueFree('n.queue_name', s)}
          offset 0
        ) n
        cross join lateral (${queueHead('n.queue_name', s, 'e.id, e.xmin as version, e.queue_name, e.priority, e.run_at, e.task_identifier, e.flags')}) h
        where h.run_at <= now() and ${claimable('h')}
      ),
      heads as materialized (
        select id, version, priority, run_at from walked_heads where not (select needed from enumerate)
        union all
        select id, version, priority, run_at from enumerated_heads
        order by priority, run_at, id
        limit ${QUEUED_WALK_FACTOR} * $3::int
      ),
      unqueued as materialized (
        select j.id, j.queue_name, j.priority, j.run_at
        from ${s}.jobs j
        where j.is_available and j.queue_name is null
          and j.run_at <= now()
          and ${claimable('j')}
          and j.cancel_requested_at is null
          and exists (select 1 from ${s}.workers w where w.id = $4)
        order by j.priority, j.run_at, j.id
        limit $3
        for update of j skip locked
      ),
      queued as materialized (
        select l.id, l.queue_name, l.priority, l.run_at
        from (
          select h.* from heads h
          where (select count(*) from unqueued) < $3
             or (h.priority, h.run_at, h.id) < (select u.priority, u.run_at, u.id from unqueued u order by u.priority desc, u.run_at desc, u.id desc limit 1)
          order by h.priority, h.run_at, h.id
          offset 0
        ) f
        cross join lateral (
          select j.id, j.queue_name, j.priority, j.run_at
          from ${s}.jobs j
          where j.id = f.id and j.xmin = f.version
          for update of j skip locked
        ) l
        where exists (select 1 from ${s}.workers w where w.id = $4)
        limit $3
      ),
      candidates as materialized (
        select c.id, c.queue_name, c.priority, c.run_at
        from (select * from unqueued union all select * from queued) c
        order by c.priority, c.run_at, c.id
        limit $3
      ),
      locked_queues as (
        insert into ${s}.job_queues as q (queue_name, locked_at, locked_by)
        select distinct queue_name, now(), $4 from candidates where queue_name is not null
        on conflict (queue_name) do update set locked_at = excluded.locked_at, locked_by = excluded.locked_by
        where q.locked_at is null
        returning q.queue_name
      ),
      picked as (
        select array_agg(id order by priority, run_at, id) as ids from candidates
        where queue_name is null or queue_name in (select queue_name from locked_queues)
      )
      update ${s}.jobs j
      set attempts = j.attempts + 1, locked_at = now(), locked_by = $4, updated_at = now(),
          started_at = case when j.id = any((select ids[1:$5] from picked)::bigint[]) then now() end
      where j.id = any((select ids from picked)::bigint[])
      returning ${CLAIMED_COLUMNS}, (select count(*) from candidates)::int as candidate_count`,

    /**
     * One flush of the release batches for worker $1. Only rows this worker still holds are
     * touched: a job it lost (rescued after a stall, say) is not its to write.
     *
     * - Jobs that finish leave `jobs` for `finished_jobs` (`finished`, `kept`): the ones that
     *   succeeded ($2 ids; $3 their results, a jsonb object by id, holding those that returned
     *   something), the failures that were their last attempt, and any job whose cancel was
     *   requested, which ends `cancelled` whatever its handler did. A success is kept only if
     *   $9 (retention.completed is not 0); the others always are (the cleaner deletes what its
     *   retention says).
     * - The other failures ($4 ids; $5 a jsonb object by id of `{message, code, delay_ms}`) are
     *   unlocked with the error appended to `errors` (the latest MAX_KEPT_ERRORS kept), run_at
     *   moved (their queue place kept in first_run_at). Two codes steer the outcome (worker/handler-outcomes.ts):
     *   JQ_JOB_FAILED_FOR_GOOD ends the job failed whatever attempts it has left; JQ_JOB_SNOOZED
     *   retries it with its attempt given back, even on its last one.
     * - Jobs still running get their start mark ($6: prefetched jobs whose handlers began
     *   since) and progress ($7 ids; $8 a jsonb object by id; a finishing job's last progress
     *   rides on its own row).
     * - Waiters (waitForJob) hear the finished ids on the finished channel: one NOTIFY per flush.
     *
     * A keyed job can be row-locked by a caller for as long as the caller's transaction lasts
     * (add_job replacing it while it runs): the rows named here that this worker holds are
     * read once (`mine`), the keyed ones among them taken SKIP LOCKED (`held`), and those
     * someone holds come back in `busy` for a later flush, so that one lock holds up one job
     * and never the worker's others. So do the rare rows a concurrent cancel changed under
     * this statement. Keyless rows nobody locks for long: they are taken directly, which
     * spares the drain a lock record per job.
     *
     * It runs prepared (planning it took a fifth of its time), so after a few runs its plan is
     * a generic one, made without knowing how many ids a flush names and with whatever
     * statistics `jobs` has. Hence its shape: every part reaches `jobs` by primary key from an
     * array of ids (`id = any`, `heldBy`), and takes each job's outcome from a jsonb object by
     * id or a hashed set, never from a join. A join to a list of outcomes was planned as a
     * nested loop over the list per row (quadratic), or as a scan of every job the worker
     * holds, or of the whole table when the statistics said it was empty
     * (test/worker/release-plan.test.ts).
     */
    releaseJobs: `
      with mine as materialized (
        select j.id, j.key, 'completed' as part from ${s}.jobs j where j.id = any($2::bigint[]) and ${heldBy('j', '$1')}
        union all
        select j.id, j.key, 'failed' from ${s}.jobs j where j.id = any($4::bigint[]) and ${heldBy('j', '$1')}
        union all
        select j.id, j.key, 'started' from ${s}.jobs j where j.id = any($6::bigint[]) and ${heldBy('j', '$1')}
        union all
        select j.id, j.key, 'progress' from ${s}.jobs j where j.id = any($7::bigint[]) and ${heldBy('j', '$1')}
      ),
      held as materialized (
        select j.id from ${s}.jobs j
        where j.id = any(array(select id from mine where key is not null)) and ${heldBy('j', '$1')}
        for no key update skip locked
      ),
      finished as (
        delete from ${s}.jobs j
        where j.id = any($2::bigint[] || $4::bigint[]) and ${heldBy('j', '$1')} and (j.key is null or j.id in (select id from held))
          and (j.id in (select id from mine where part = 'completed')
               or (j.attempts >= j.max_attempts and ${failure('j', 'code')} is distinct from 'JQ_JOB_SNOOZED')
               or ${failure('j', 'code')} = 'JQ_JOB_FAILED_FOR_GOOD' or j.cancel_requested_at is not null)
        returning j.*, ${failure('j', 'message')} as message, ${failure('j', 'code')} as code,
          case when j.cancel_requested_at is not null then 'cancelled'
               when j.id in (select id from mine where part = 'completed') then 'completed' else 'failed' end as state
      ),
      kept as (${keepFinished(s, 'finished f', {
        state: 'f.state',
        result: `case when f.state = 'completed' then $3::jsonb -> f.id::text end`,
        progress: `coalesce($8::jsonb -> f.id::text, f.progress)`,
        errors: `case when f.state = 'failed'
          then ${withError('f.errors', `jsonb_build_object('at', now(), 'attempt', f.attempts, 'message', f.message, 'code', f.code)`)}
          else f.errors end`,
        lastError: `case f.state when 'failed' then f.message when 'cancelled' then ${cancelledError('f')} end`,
        workerId: '$1',
        // a claimed job cancelled before it started gets its attempt back, as a give-back does
        attempts: `case when f.state = 'cancelled' and f.started_at is null then greatest(f.attempts - 1, 0) else f.attempts end`,
        // a prefetched job that finished before its start mark was written started about now
        startedAt: `case when f.state = 'cancelled' then f.started_at else coalesce(f.started_at, now()) end`,
        where: `f.state <> 'completed' or $9::boolean`,
      })}
      ),
      retried as (
        update ${s}.jobs j set
          last_error = ${failure('j', 'message')},
          errors = ${withError('j.errors', `jsonb_build_object('at', now(), 'attempt', j.attempts, 'message', ${failure('j', 'message')}, 'code', ${failure('j', 'code')})`)},
          progress = coalesce($8::jsonb -> j.id::text, j.progress),
          first_run_at = coalesce(j.first_run_at, j.run_at),
          started_at = coalesce(j.started_at, now()),
          run_at = now() + (${failure('j', 'delay_ms')})::float8 * interval '1 millisecond',
          attempts = case when ${failure('j', 'code')} = 'JQ_JOB_SNOOZED' then greatest(j.attempts - 1, 0) else j.attempts end,
          locked_at = null, locked_by = null, updated_at = now()
        where j.id = any($4::bigint[]) and ${heldBy('j', '$1')} and (j.key is null or j.id in (select id from held))
          and (j.attempts < j.max_attempts or ${failure('j', 'code')} = 'JQ_JOB_SNOOZED')
          and ${failure('j', 'code')} is distinct from 'JQ_JOB_FAILED_FOR_GOOD'
          and j.cancel_requested_at is null
        returning j.id, j.queue_name
      ),
      touched as (
        update ${s}.jobs j set
          started_at = case when j.id in (select id from mine where part = 'started') then coalesce(j.started_at, now()) else j.started_at end,
          progress = coalesce($8::jsonb -> j.id::text, j.progress)
        where j.id = any($6::bigint[] || $7::bigint[]) and j.id not in (select id from mine where part in ('completed', 'failed'))
          and ${heldBy('j', '$1')} and (j.key is null or j.id in (select id from held))
      ),
      released as (select queue_name from finished union all select queue_name from retried),
      ${unlockQueuesOf('released', '$1')},
      told as (${tellFinished(finished, 'finished')}),
      busy as (
        select m.id from mine m
        where m.part in ('completed', 'failed') and m.id not in (select id from finished) and m.id not in (select id from retried)
      )
      select (select count(*) from released)::int as released, (select count(*) from woken)::int as woken,
             (select count(*) from told)::int as told, array(select id::text from busy) as busy,
             (select coalesce(json_agg(json_build_object('id', id::text, 'reason', cancel_reason)), '[]') from finished where state = 'cancelled') as cancelled`,

    /**
     * Completes job $2 of worker $1 inside the handler's own transaction (a `transaction: true`
     * task), so that the handler's writes and the completion commit together. Only if this
     * worker still holds the job and no cancel was requested: no row back means it was rescued
     * (after a stall) or cancelled (then `cancelled`), and the caller rolls everything back. $3 result (json
     * text), $4 the last progress not written yet (json text), $5 keep completed jobs
     * (retention.completed is not 0). Frees the job's named queue and tells waiters, both
     * heard at the commit.
     */
    completeJobInTransaction: `
      with finished as (
        delete from ${s}.jobs j
        where j.id = $2::bigint and j.locked_by = $1 and j.cancel_requested_at is null
        returning j.*, 'completed'::text as state
      ),
      kept as (${keepFinished(s, 'finished f', {
        state: 'f.state',
        result: '$3::jsonb',
        progress: 'coalesce($4::jsonb, f.progress)',
        lastError: 'null',
        workerId: '$1',
        startedAt: 'coalesce(f.started_at, now())',
        where: '$5::boolean',
      })}
      ),
      ${unlockQueuesOf('finished', '$1')},
      told as (${tellFinished(finished, 'finished')})
      select (select count(*) from finished)::int as completed, (select count(*) from woken)::int as woken,
             (select count(*) from told)::int as told,
             exists (select 1 from ${s}.jobs where id = $2::bigint and locked_by = $1 and cancel_requested_at is not null) as cancelled`,

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

    ...createLifecycleQueries(s),
    ...createWorkerQueries(s, channel, finished),
    ...createMaintenanceQueries(s, channel, finished),
    ...createOperationsQueries(s, finished),
  };
}

export type JobQueueQueries = ReturnType<typeof createQueries>;
