/**
 * Claiming jobs, the data path's second step (add → row + NOTIFY → claim → run → release):
 * a worker takes the next available jobs of its tasks, and locks the named queues they
 * belong to, in one statement (claimJobs). `s` is the quoted schema.
 */

import { epochMicroseconds } from './epoch-microseconds';
import { queueHead } from './queue-head';

/**
 * What the claim returns of each job (worker/claimed-job.ts makes the Job): only what the
 * worker does not know already, in the forms cheapest to read. Times are whole epoch
 * microseconds (sql/epoch-microseconds.ts), the claim's own times (locked_at,
 * updated_at, a started_at it set) are one `claimed_at_us`, flags are null when empty;
 * locked_by is the worker, and cancel_requested_at is null (the claim skips cancelled jobs).
 * Reading the 24 columns of a job row took Node 10 µs a job, half of all the JavaScript a
 * trivial job costs.
 */
export const CLAIMED_COLUMNS = `j.id, j.task_identifier, j.queue_name, j.group_key, j.payload, j.priority, j.attempts, j.max_attempts, j.last_error, j.key,
  j.revision, nullif(j.flags, '{}') as flags, j.progress, j.errors, j.trace_id, j.span_id, j.trace_flags, j.flow_id, j.flow_ref,
  ${epochMicroseconds('j.run_at')} as run_at_us, ${epochMicroseconds('j.created_at')} as created_at_us,
  ${epochMicroseconds('now()')} as claimed_at_us, j.started_at is not null as started`;

/**
 * The claim's write, shared by every claim statement: the jobs `ids` (an array expression) locked
 * for worker $4 with an attempt more, those of `started` marked started, returning
 * CLAIMED_COLUMNS. Found by `id = any(array)`: see claimStatement for why.
 */
export const claimUpdate = (s: string, ids: string, started: string) => `update ${s}.jobs j
      set attempts = j.attempts + 1, locked_at = now(), locked_by = $4, updated_at = now(),
          started_at = case when j.id = any(${started}) then now() end
      where j.id = any(${ids})
      returning ${CLAIMED_COLUMNS}`;

/**
 * How many queued jobs, per job asked for, the claim looks at in fetch order for its queues'
 * heads before it looks up each queue's head instead (see claimJobs).
 */
const QUEUED_WALK_FACTOR = 2;

/** No worker holds queue `queue`. */
const queueFree = (queue: string, s: string) => `not exists (select 1 from ${s}.job_queues q where q.queue_name = ${queue} and q.locked_at is not null)`;

/** Row `j` is a job of the claim's tasks ($1) carrying none of its forbidden flags ($2). */
const claimable = (j: string) => `array_position($1::text[], ${j}.task_identifier) is not null and not (${j}.flags && $2::text[])`;

/** Queue `queue` is not paused: none of the claim's paused queues ($6; an empty array when none is, which costs nothing). */
const queueRuns = (queue: string) => `${queue} <> all($6::text[])`;

/** A queue head `h` this claim may take: claimable, its queue neither paused nor held by a worker (a head has no cancel asked for: queueHead). */
const claimableHead = (h: string, s: string) => `${claimable(h)} and ${queueRuns(`${h}.queue_name`)} and ${queueFree(`${h}.queue_name`, s)}`;

export function createClaimQueries(s: string) {
  return {
    claimJobs: claimStatement(s),
    /**
     * claimJobs for a task with group limits (sql/group-claim.ts claims its grouped jobs): its
     * jobs without a group only. A job with a group is in no named queue (the job spec refuses
     * both), so only the unqueued walk tells them apart.
     */
    claimUngroupedJobs: claimStatement(s, { ungroupedOnly: true }),
    /**
     * claimJobs for the jobs named by the NOTIFYs that woke the worker ($6, ids), when its last
     * claim found nothing more waiting (worker/producer.ts): those of them still claimable, with
     * the same rules, SET and RETURNING, found by primary key. A job in a named queue is never
     * named (sql/add.ts jobNamed). Its plan is a few nodes, where the general claim's are
     * dozens that the server sets up at every run (0.3–0.6 ms on this VM, beyond what
     * pg_stat_statements counts as its execution); the claim of a job added in another process
     * is this one. Ids others have locked, taken or cancelled are skipped: nothing else is
     * claimed, as nothing else was waiting. candidate_count counts the jobs taken. No order in
     * `picked`: with sorts off (CLAIM_SETTINGS) an order would have the planner walk
     * jobs_fetch_unqueued_idx past every other due job (50,000 read for one, 20 ms) where the
     * ids are primary-key probes; the few taken are ordered for `started` alone. is_available
     * is read through coalesce() so that no fetch index (each is partial on is_available) can
     * serve `picked`: as a plain condition, a generic plan made while the table was small
     * walked jobs_task_fetch_idx past the waiting jobs of every task sorting before the named
     * job's (10.6 ms a claim beside 50,000 of them, against 0.4), until the next ANALYZE.
     */
    claimJobsById: `
      with picked as materialized (
        select j.id, j.priority, j.run_at
        from ${s}.jobs j
        where j.id = any($6::bigint[]) and coalesce(j.is_available, false) and j.queue_name is null
          and j.run_at <= now() and ${claimable('j')} and j.cancel_requested_at is null
          and exists (select 1 from ${s}.workers w where w.id = $4)
        limit $3::int
        for update of j skip locked
      ),
      started as (select array(select id from picked order by priority, run_at, id limit $5::int) as ids)
      ${claimUpdate(s, 'array(select id from picked)', '(select ids from started)::bigint[]')}, (select count(*) from picked)::int as candidate_count`,
  };
}

/** What sets a claim statement apart from the general claim (each variant is prepared apart, so the general claim's text and plan stay as they are). */
export interface ClaimVariant {
  /** Only jobs without a group (claimUngroupedJobs). */
  ungroupedOnly?: boolean;
  /** CTEs before the claim's own, which `limit` and `started` may read (sql/counted-claim.ts). */
  before?: string;
  /** How many jobs to claim at most: $3 by default. */
  limit?: string;
  /** How many of them to mark started: $5 by default. */
  started?: string;
  /** With it, the claimed rows are the CTE `claimed`, and this follows it (more CTEs, then the statement's select). */
  after?: string;
}

/** The claim, or one of its variants (ClaimVariant). */
export function claimStatement(s: string, variant: ClaimVariant = {}): string {
  const { ungroupedOnly = false, before = '', limit = '$3', started = '$5', after = '' } = variant;
  const limitInt = limit === '$3' ? '$3::int' : limit;
  return (
    /**
     * The claim. Up to $3 available jobs of the tasks $1 that carry none of the flags $2,
     * by priority then run_at then id, skipping rows other workers are claiming, for worker
     * $4, which must still have its row (a worker declared dead claims nothing under its old
     * id). The first $5 of them (the free slots) are marked started; the rest are prefetched.
     *
     * Pauses (control/, sql/pauses.ts) are this same rule: the worker leaves paused tasks out
     * of $1 and passes the paused named queues as $6, from what it keeps in memory. A paused
     * queue's head is no candidate, so the queue keeps its order; a paused task's job at a
     * queue's head is not claimable, so it holds its queue as a head of another app's task does.
     * With nothing paused, $1 is the worker's tasks and $6 empty: the same plan and cost.
     * Tasks with a globalConcurrency leave $1 too: each is claimed by this statement with $1 its
     * task alone and $3 its free slots, under the task's lock (sql/limits.ts).
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
     * - `unqueued_from`: where the claim's tasks' available unqueued jobs begin in fetch order,
     *   the first of each task's in jobs_task_fetch_idx (one index probe a task), so that the
     *   walk starts there and never reads, one by one, the jobs ahead of tasks it leaves out
     *   (paused, over a limit, another app's: 18 ms a claim behind 100,000 of them). None:
     *   nothing to claim. The comparison is a condition of the walk's index scan.
     * - `unqueued`: the first $3 of jobs_fetch_unqueued_idx from there, locked as walked (SKIP
     *   LOCKED: the walk goes past whatever claims beside it are taking, and each row's lock
     *   rechecks all of its conditions on the row's latest version).
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
    `
      with recursive ${before}walked as (
        select j.id, j.xmin as version, j.queue_name, j.priority, j.run_at, j.first_run_at, j.task_identifier, j.flags
        from ${s}.jobs j
        where j.is_available and j.queue_name is not null and j.run_at <= now() and j.cancel_requested_at is null
        order by j.priority, j.run_at, j.id
        limit ${QUEUED_WALK_FACTOR} * ${limitInt}
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
        select (select count(*) from walked_heads) < ${limit} and (select count(*) from walked) = ${QUEUED_WALK_FACTOR} * ${limitInt} as needed
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
          where n.queue_name is not null and ${queueRuns('n.queue_name')} and ${queueFree('n.queue_name', s)}
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
        limit ${QUEUED_WALK_FACTOR} * ${limitInt}
      ),
      unqueued_from as materialized (
        select f.priority, f.run_at, f.id
        from unnest($1::text[]) t(task)
        cross join lateral (
          select e.priority, e.run_at, e.id from ${s}.jobs e
          where e.task_identifier = t.task and e.is_available and e.queue_name is null
          order by e.priority, e.run_at, e.id limit 1
        ) f
        order by f.priority, f.run_at, f.id limit 1
      ),
      unqueued as materialized (
        select j.id, j.queue_name, j.priority, j.run_at
        from ${s}.jobs j
        where j.is_available and j.queue_name is null
          and (j.priority, j.run_at, j.id) >= (select priority, run_at, id from unqueued_from)
          and j.run_at <= now()
          and ${claimable('j')}${ungroupedOnly ? ' and j.group_key is null' : ''}
          and j.cancel_requested_at is null
          and exists (select 1 from ${s}.workers w where w.id = $4)
        order by j.priority, j.run_at, j.id
        limit ${limit}
        for update of j skip locked
      ),
      queued as materialized (
        select l.id, l.queue_name, l.priority, l.run_at
        from (
          select h.* from heads h
          where (select count(*) from unqueued) < ${limit}
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
        limit ${limit}
      ),
      candidates as materialized (
        select c.id, c.queue_name, c.priority, c.run_at
        from (select * from unqueued union all select * from queued) c
        order by c.priority, c.run_at, c.id
        limit ${limit}
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
      )${after ? ',\n      claimed as (' : '\n      '}${claimUpdate(s, '(select ids from picked)::bigint[]', `(select ids[1:${started}] from picked)::bigint[]`)}, (select count(*) from candidates)::int as candidate_count${after ? `)${after}` : ''}`
  );
}
