/**
 * Adding jobs, the data path's first step (add → row + NOTIFY → claim → run → release): one
 * job or many, keyed (through add_grouped_job()) or keyless (plain inserts), each NOTIFYing the jobs
 * channel when due. `s` is the quoted schema, `channel` the jobs channel.
 */

import { DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY } from '../core/job-defaults';
import { epochMicroseconds } from './epoch-microseconds';
import { advisoryLockClass } from './identifier';
import { jobColumns } from './job-columns';

/**
 * The columns a job without a key is inserted with, and their values from addJobKeyless's
 * parameters ($1..$11), the table's defaults (core/job-defaults.ts) for what the caller
 * left out: shared by addJobKeyless and addJobStarted.
 */
const KEYLESS_COLUMNS = 'task_identifier, payload, queue_name, run_at, max_attempts, priority, flags, trace_id, span_id, trace_flags, group_key';
const KEYLESS_VALUES = `$1::text, coalesce($2::jsonb, '{}'::jsonb), $3::text, coalesce($4::timestamptz, now()), coalesce($5::integer, ${DEFAULT_MAX_ATTEMPTS}),
                coalesce($6::integer, ${DEFAULT_PRIORITY}), coalesce($7::text[], '{}'), $8::uuid, $9::bigint, $10::smallint, $11::text`;

/** The SQL types of addJobKeyless's parameters ($1..$11), in order, for its SQL PREPARE (JobQueueDatabase.runThenNotify). */
export const KEYLESS_TYPES = ['text', 'jsonb', 'text', 'timestamptz', 'integer', 'integer', 'text[]', 'uuid', 'bigint', 'smallint', 'text'];

/** add_grouped_job()'s parameters after add_job's nine: the group, then the trace context (addJobKeyed). */
const GROUPED_TAIL = '$10::text, $11::uuid, $12::bigint, $13::smallint';

/** An add's new row's times (service/added-jobs.ts), from a CTE named `inserted`: whole epoch microseconds (sql/epoch-microseconds.ts). */
const ADDED_TIMES = `${epochMicroseconds('inserted.run_at')} as run_at_us, ${epochMicroseconds('inserted.created_at')} as created_at_us`;

/**
 * The payload of the NOTIFY of one job added in a transaction of its own: its id when it is in
 * no named queue, for workers to claim it by id (sql/claim.ts claimJobsById); '' (claim whatever
 * is next) for a job of a named queue, which only the general claim may take, as its queue's
 * head. Adds in a caller's transaction say '': PostgreSQL sends identical NOTIFYs of one
 * transaction once, where a thousand adds naming their jobs would send a thousand.
 */
const jobNamed = (row: string) => `case when ${row}.queue_name is null then ${row}.id::text else '' end`;

export function createAddQueries(s: string, channel: string) {
  /** addJobKeyless (see its comment), NOTIFYing the workers itself when the job is due (`notify`: '' or the job named) or not (addJobKeylessQuiet). */
  const addKeyless = (notify: 'any' | 'named' | false) => `
      with queue as (
        insert into ${s}.job_queues (queue_name) select $3::text where $3::text is not null on conflict do nothing
      ),
      inserted as (
        insert into ${s}.jobs (${KEYLESS_COLUMNS})
        values (${KEYLESS_VALUES})
        returning id, run_at, created_at, queue_name
      )${notify ? `,
      notified as (select pg_notify('${channel}', ${notify === 'named' ? jobNamed('inserted') : "''"}) from inserted where run_at <= now())` : ''}
      select inserted.id, ${ADDED_TIMES} from inserted${notify ? ' left join notified on true' : ''}`;

  /** addJobsBulk (see its comment), with its NOTIFY or without (addJobsBulkQuiet). */
  const addBulk = (notify: boolean) => `
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
        insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, priority, flags, trace_id, span_id, trace_flags, group_key)
        select identifier, coalesce(payload::jsonb, '{}'::jsonb), queue_name, coalesce(run_at, now()),
               coalesce(max_attempts, ${DEFAULT_MAX_ATTEMPTS}), coalesce(priority, ${DEFAULT_PRIORITY}),
               case when flags is null then '{}'::text[] else array(select jsonb_array_elements_text(flags::jsonb)) end, $8::uuid, $9::bigint, $10::smallint,
               ($11::text[])[ord::int]
        from specs order by ord
        returning id, run_at, created_at
      )${notify ? `,
      notified as (select pg_notify('${channel}', '') from inserted where run_at <= now() limit 1)` : ''}
      select inserted.id, ${ADDED_TIMES} from inserted${notify ? ' left join notified on true' : ''} order by inserted.id`;

  return {
    /**
     * A job with a job key: add_grouped_job() (add_job() with the group and the trace context,
     * written in one row version). $1 identifier, $2 payload (json text), $3 queue, $4 run_at,
     * $5 max_attempts, $6 key, $7 priority, $8 flags, $9 key mode, $10 group, $11 $12 $13 the
     * trace id, span id and trace flags of the span that adds it (telemetry/trace-context.ts), or nulls.
     */
    addJobKeyed: `select ${jobColumns('j')} from ${s}.add_grouped_job($1::text, $2::jsonb, $3::text, $4::timestamptz, $5::integer, $6::text, $7::integer, $8::text[], $9::text, ${GROUPED_TAIL}) j`,
    /**
     * A job without a job key, as add_job() would add it, in plain SQL: no function call
     * (plpgsql costs about a sixth of the round trip), and only what the database decides
     * comes back (service/added-jobs.ts). $1 identifier, $2 payload (json text), $3 queue,
     * $4 run_at, $5 max_attempts, $6 priority, $7 flags, $8 $9 $10 the trace id, span id and
     * trace flags of the span that adds it, or nulls, $11 its group or null.
     */
    addJobKeyless: addKeyless('any'),
    /** addJobKeyless naming its job in its NOTIFY (jobNamed): an add without a caller's manager through a transaction-mode pooler, where no NOTIFY follows the commit (JobQueueDatabase.runThenNotify). */
    addJobKeylessNamed: addKeyless('named'),
    /**
     * addJobKeyless without its NOTIFY: an add in a transaction of our own (no caller's
     * manager) sends that after the commit, in a transaction of its own
     * (JobQueueDatabase.runThenNotify; sql/notify-after.ts notifyIfDue).
     */
    addJobKeylessQuiet: addKeyless(false),
    /**
     * addJobKeyless for a due job of no named queue that a worker of the adding process has
     * kept a free slot for (service/local-start.ts): inserted already claimed by worker $11,
     * attempt 1 started, as claimJobs would leave it, and without a NOTIFY, so that no other
     * worker looks for it. If $11 has no row (the cluster declared it dead) or the job is not
     * due, it is added as addJobKeyless adds it, NOTIFY included (`locked_by` null).
     * $1..$11 are addJobKeyless's ($3 null: no named queue), $12 the worker's id.
     */
    addJobStarted: `
      with claimer as (
        select exists (select 1 from ${s}.workers w where w.id = $12::text) and coalesce($4::timestamptz, now()) <= now() as takes
      ),
      inserted as (
        insert into ${s}.jobs (${KEYLESS_COLUMNS}, attempts, locked_at, locked_by, started_at)
        select ${KEYLESS_VALUES},
               case when c.takes then 1 else 0 end, case when c.takes then now() end,
               case when c.takes then $12::text end, case when c.takes then now() end
        from claimer c
        returning id, run_at, created_at, locked_by, queue_name
      ),
      notified as (select pg_notify('${channel}', ${jobNamed('inserted')}) from inserted where locked_by is null and run_at <= now())
      select inserted.id, ${ADDED_TIMES}, inserted.locked_by from inserted left join notified on true`,

    /**
     * Many jobs without job keys in one statement: set-based, one NOTIFY.
     * $1..$7 are parallel arrays: identifiers, payloads (json text), queues, run_ats, max_attempts, priorities, flags (json text);
     * $8, $9, $10 the trace id, span id and trace flags of the span that adds them, or nulls;
     * $11 their groups (an array parallel to $1), or null when none has one.
     * Returns only what the database decides (id, run_at_us, created_at_us), in the order given: the
     * rest of each new row is what the caller sent (service/added-jobs.ts), and sending it back
     * would cost more than the insert.
     */
    addJobsBulk: addBulk(true),
    /** addJobsBulk without its NOTIFY, which addMany without a caller's manager sends after the commit (addJobKeylessQuiet's way). */
    addJobsBulkQuiet: addBulk(false),

    /** Many jobs, some with job keys: add_grouped_job per spec, in order, in one statement. addJobsBulk's $1..$7, then $8 keys, $9 key modes, $10 groups, $11 $12 $13 the trace context or nulls. */
    addJobsKeyed: `
      select ${jobColumns('j')} from unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::integer[], $6::integer[], $7::text[], $8::text[], $9::text[], $10::text[])
          with ordinality as s(identifier, payload, queue_name, run_at, max_attempts, priority, flags, key, key_mode, group_key, ord)
        cross join lateral ${s}.add_grouped_job(s.identifier, s.payload::jsonb, s.queue_name, s.run_at, s.max_attempts, s.key, s.priority,
          array(select jsonb_array_elements_text(s.flags::jsonb)), s.key_mode, s.group_key, $11::uuid, $12::bigint, $13::smallint) as j
      order by s.ord`,

    /**
     * The first statement of `dedupeFor` adds (service/deduped-add.ts): $1 their keys. Adds of one
     * key with dedupeFor take turns, each to the end of its transaction, so that the next one's
     * look (recentJobByKey, a statement of its own, so a snapshot taken after the wait) sees what
     * the last one added. The keys are locked in one order (by hash), so that two addMany calls
     * naming the same keys in other orders cannot deadlock. Only in READ COMMITTED, where that
     * later snapshot is the statement's own: returns the transaction's isolation level, and
     * locks nothing under another. Keys of the two-int space, apart from the library's other
     * advisory locks.
     */
    lockJobKeys: `
      select s.isolation
      from (select current_setting('transaction_isolation') as isolation) s
      left join lateral (
        select k.hash, pg_advisory_xact_lock(${advisoryLockClass(s, 'job_key')}, k.hash)::text as held
        from (select distinct hashtext(key) as hash from unnest($1::text[]) key order by 1 offset 0) k
        where s.isolation = 'read committed'
      ) l on true
      group by s.isolation`,
    /**
     * $1 key, $2 dedupeFor in ms: the id of the newest job with the key added less than $2 ago,
     * unfinished or finished, or no row. The finished one through finished_jobs_key_created_idx:
     * one index probe however long the key's history.
     */
    recentJobByKey: `
      select k.id::text as id from (
        select j.id, j.created_at from ${s}.jobs j where j.key = $1
        union all
        (select f.id, f.created_at from ${s}.finished_jobs f
         where f.key = $1 and f.created_at > now() - $2::float8 * interval '1 millisecond'
         order by f.created_at desc limit 1)
      ) k
      where k.created_at > now() - $2::float8 * interval '1 millisecond'
      order by k.created_at desc
      limit 1`,
  };
}
