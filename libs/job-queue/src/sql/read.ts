/**
 * Reading jobs, beside the data path (add → row + NOTIFY → claim → run → release): getJob,
 * getJobs, getJobsByKey, findJobsOfTask, listJobs (countJobs: sql/counts.ts). Unfinished jobs live in `jobs`; a job
 * that completes, fails for good or is cancelled moves to `finished_jobs` (migration
 * JobLifecycle1763900000000). Reads put both tables in one shape, `state` included.
 * `s` is the quoted schema. (Moving jobs between states on request: sql/admin.ts.)
 */

import { FINISHED_STATES, type JobState } from '../core/job-state';

/**
 * The state of a row of `jobs`. The last two are rows that are done but not moved yet: a
 * cancel that a worker's give-back or a rescue let go of, or a failure written by a worker
 * of the previous version; the maintenance leader moves them to finished_jobs. Scheduled is
 * due later than both now and the job's creation: a job that a transaction begun after this
 * one's now() added, due at once, is waiting (as the counts of sql/counts.ts have it).
 */
export const activeState = (j: string) => `case
    when ${j}.locked_at is not null and ${j}.started_at is not null then 'running'
    when ${j}.locked_at is not null then 'waiting'
    when ${j}.cancel_requested_at is not null then 'cancelled'
    when ${j}.attempts >= ${j}.max_attempts then 'failed'
    when ${j}.attempts > 0 then 'retrying'
    when ${j}.run_at > now() and ${j}.run_at > ${j}.created_at then 'scheduled'
    else 'waiting'
  end`;

/**
 * One state of `jobs` as a list's condition: activeState itself, so the two never disagree;
 * running jobs are held ones, which jobs_locked_by_idx finds without walking the backlog.
 */
const activeCondition = (state: JobState) => `${state === 'running' ? 'j.locked_by is not null and ' : ''}${activeState('j')} = '${state}'`;

/** A row of `jobs` as a job read: the columns of JobRow. */
const activeColumns = (j: string) => `
  ${j}.id, ${j}.task_identifier, ${j}.queue_name, ${j}.payload, ${j}.priority, ${j}.run_at, ${j}.attempts, ${j}.max_attempts,
  ${j}.last_error, ${j}.key, ${j}.revision, ${j}.flags, ${j}.locked_at, ${j}.locked_by, ${j}.created_at, ${j}.updated_at,
  ${j}.started_at, ${j}.first_run_at, ${j}.progress, ${j}.errors, ${j}.cancel_requested_at, ${j}.trace_id, ${j}.span_id, ${j}.trace_flags,
  ${activeState(j)} as state, null::jsonb as result, null::timestamptz as finished_at, ${j}.locked_by as worker_id,
  null::text as finished_at_key, ${j}.flow_id, ${j}.flow_ref, ${j}.group_key`;

/** A row of `blocked_jobs` (a flow's job waiting for its dependencies) in the same shape: its run_at is when it may run once unblocked (its creation when none was given). */
const blockedColumns = (b: string) => `
  ${b}.id, ${b}.task_identifier, ${b}.queue_name, ${b}.payload, ${b}.priority, coalesce(${b}.run_at, ${b}.created_at) as run_at, 0 as attempts, ${b}.max_attempts,
  null::text as last_error, null::text as key, 0 as revision, ${b}.flags, null::timestamptz as locked_at, null::text as locked_by, ${b}.created_at,
  ${b}.created_at as updated_at, null::timestamptz as started_at, null::timestamptz as first_run_at, null::jsonb as progress, null::jsonb as errors,
  null::timestamptz as cancel_requested_at, ${b}.trace_id, ${b}.span_id, ${b}.trace_flags, 'blocked'::text as state, null::jsonb as result,
  null::timestamptz as finished_at, null::text as worker_id, null::text as finished_at_key, ${b}.flow_id, ${b}.flow_ref, null::text as group_key`;

/** A row of `finished_jobs` in the same shape. */
const finishedColumns = (f: string) => `
  ${f}.id, ${f}.task_identifier, ${f}.queue_name, ${f}.payload, ${f}.priority, ${f}.run_at, ${f}.attempts, ${f}.max_attempts,
  ${f}.last_error, ${f}.key, 0 as revision, ${f}.flags, null::timestamptz as locked_at, null::text as locked_by, ${f}.created_at,
  ${f}.finished_at as updated_at, ${f}.started_at, null::timestamptz as first_run_at, ${f}.progress, ${f}.errors,
  null::timestamptz as cancel_requested_at, null::uuid as trace_id, null::bigint as span_id, null::smallint as trace_flags, ${f}.state, ${f}.result, ${f}.finished_at, ${f}.worker_id,
  ${f}.finished_at::text as finished_at_key, ${f}.flow_id, ${f}.flow_ref, ${f}.group_key`;

const MAX_BIGINT = '9223372036854775807';

export function createReadQueries(s: string) {
  /** $1 task or null, $2 queue or null, $3 cursor id or null, $4 limit. Newest first. */
  const listActive = (state: JobState | null) => {
    const filters = (r: string) => `($1::text is null or ${r}.task_identifier = $1) and ($2::text is null or ${r}.queue_name = $2)
      and ${r}.id < coalesce($3::bigint, ${MAX_BIGINT})`;
    const active = `(select ${activeColumns('j')} from ${s}.jobs j
      where ${state ? activeCondition(state) : 'true'} and ${filters('j')}
      order by j.id desc limit $4)`;
    const blocked = `(select ${blockedColumns('b')} from ${s}.blocked_jobs b where ${filters('b')} order by b.id desc limit $4)`;
    if (state === 'blocked') return blocked;
    return state === null ? `select * from (${active} union all ${blocked}) unfinished order by id desc limit $4` : active;
  };

  /**
   * $1 task or null, $2 queue or null, $3 cursor finished_at or null, $4 cursor id, $5 limit.
   * Last finished first, walking finished_jobs_state_idx backwards (one walk per state), or
   * finished_jobs_task_idx for one task (`ofTask`: $1 is then required), so that a task with
   * few finished jobs among a million is found without walking the others.
   */
  const listFinished = (states: readonly JobState[], ofTask = false) => {
    const walk = (state: JobState) => `
      (select ${finishedColumns('f')} from ${s}.finished_jobs f
       where ${ofTask ? 'f.task_identifier = $1 and ' : ''}f.state = '${state}'
         and (f.finished_at, f.id) < (coalesce($3::timestamptz, 'infinity'), coalesce($4::bigint, ${MAX_BIGINT}))
         and ($1::text is null or f.task_identifier = $1) and ($2::text is null or f.queue_name = $2)
       order by f.finished_at desc, f.id desc
       limit $5)`;
    return `select * from (${states.map(walk).join(' union all ')}) finished order by finished_at desc, id desc limit $5`;
  };

  return {
    /** $1 id: the job in whichever table holds it. */
    getJob: `
      select ${activeColumns('j')} from ${s}.jobs j where j.id = $1::bigint
      union all
      select ${blockedColumns('b')} from ${s}.blocked_jobs b where b.id = $1::bigint
      union all
      select ${finishedColumns('f')} from ${s}.finished_jobs f where f.id = $1::bigint
      limit 1`,

    /** $1 ids: the jobs in whichever table holds them (a job moving between the two meanwhile may come twice). */
    getJobs: `
      select ${activeColumns('j')} from ${s}.jobs j where j.id = any($1::bigint[])
      union all
      select ${blockedColumns('b')} from ${s}.blocked_jobs b where b.id = any($1::bigint[])
      union all
      select ${finishedColumns('f')} from ${s}.finished_jobs f where f.id = any($1::bigint[])`,

    /** $1 key: the unfinished job with this key, then finished ones that had it, newest first (at most 50). */
    getJobsByKey: `
      select * from (
        select ${activeColumns('j')} from ${s}.jobs j where j.key = $1
        union all
        (select ${finishedColumns('f')} from ${s}.finished_jobs f where f.key = $1 order by f.finished_at desc, f.id desc limit 50)
      ) keyed
      order by finished_at desc nulls first, id desc
      limit 50`,

    /** $1 task, $2 payload (json text) the jobs' payloads contain: for tests (nestjs-job-queue/testing). Oldest first, at most 1,000. */
    findJobsOfTask: `
      select * from (
        select ${activeColumns('j')} from ${s}.jobs j where j.task_identifier = $1 and j.payload @> $2::jsonb
        union all
        select ${blockedColumns('b')} from ${s}.blocked_jobs b where b.task_identifier = $1 and b.payload @> $2::jsonb
        union all
        select ${finishedColumns('f')} from ${s}.finished_jobs f where f.task_identifier = $1 and f.payload @> $2::jsonb
      ) found
      order by id
      limit 1000`,

    listJobsActive: listActive(null),
    listJobsBlocked: listActive('blocked'),
    listJobsWaiting: listActive('waiting'),
    listJobsScheduled: listActive('scheduled'),
    listJobsRunning: listActive('running'),
    listJobsRetrying: listActive('retrying'),
    listJobsFinished: listFinished(FINISHED_STATES),
    listJobsCompleted: listFinished(['completed']),
    listJobsFailed: listFinished(['failed']),
    listJobsCancelled: listFinished(['cancelled']),
    listJobsFinishedOfTask: listFinished(FINISHED_STATES, true),
    listJobsCompletedOfTask: listFinished(['completed'], true),
    listJobsFailedOfTask: listFinished(['failed'], true),
    listJobsCancelledOfTask: listFinished(['cancelled'], true),
  };
}

/** The listing statements for a state (null: every unfinished job, then every finished one), for one task or any. */
export function listStatements(state: JobState | null, ofTask: boolean): { active?: ListStatement; finished?: ListStatement } {
  const ofTaskIf = (name: string) => (ofTask ? `${name}OfTask` : name) as ListStatement;
  if (state === null) return { active: 'listJobsActive', finished: ofTaskIf('listJobsFinished') };
  const name = `listJobs${state[0].toUpperCase()}${state.slice(1)}`;
  return (FINISHED_STATES as readonly JobState[]).includes(state) ? { finished: ofTaskIf(name) } : { active: name as ListStatement };
}

export type ListStatement = Extract<keyof ReturnType<typeof createReadQueries>, `listJobs${string}`>;
