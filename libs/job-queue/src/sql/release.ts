/**
 * Releasing jobs, the data path's last step (add → row + NOTIFY → claim → run → release):
 * a worker writes its handlers' outcomes in batches (releaseJobs), or one completion inside the
 * handler's own transaction (completeJobInTransaction), frees their queues and tells waiters.
 * `s` is the quoted schema, `channel` the jobs channel, `finished` the finished channel, `events`
 * the events channel (cluster-wide events, published only for what some listener wants).
 */

import { cancelledError, keepFinished, tellFinished, withError } from './finished';
import { epochMicroseconds } from './epoch-microseconds';
import { epochMs, eventResult, eventText, publishEvents, queueEvent, wantsEvent } from './queue-events';

/**
 * "Row `j` is held by worker `worker`", written so that no index can serve it
 * (`is not distinct from` is not indexable): a statement that names its rows by id then
 * reaches them by primary key whatever its plan. Prepared releaseJobs once took its rows
 * from jobs_locked_by_idx in a generic plan and walked all the worker held once per id.
 */
const heldBy = (j: string, worker: string) => `${j}.locked_by is not distinct from ${worker}::text`;
/**
 * Row `j` is still held under the claim a release names for it ($11: a jsonb object of
 * ClaimTokens by id, core/claim-token.ts). Only a flush written again after a failure sends
 * them (null otherwise): a first write names claims the worker still holds, since nothing
 * else frees them, so it skips the check and its cost (about 2 µs of the server's CPU a job).
 */
const heldUnder = (j: string, worker: string) => `${heldBy(j, worker)} and ($11::jsonb is null or ${claimTokenOf(j)} = $11::jsonb ->> ${j}.id::text)`;

/** SQL: row `j`'s ClaimToken (core/claim-token.ts): its locked_at's epoch millisecond, as the claim's Job has it (dateOf). */
export const claimTokenOf = (j: string) => `(${epochMicroseconds(`${j}.locked_at`)} / 1000)::text`;

/** A field of the failure releaseJobs was given for row `j` ($5, by id), as text. */
const failure = (j: string, field: 'message' | 'code' | 'delay_ms') => `($5::jsonb -> ${j}.id::text ->> '${field}')`;

/** Row `j`'s payload from now on: the one its failure brought (a batch job's failed elements), else its own. */
const payloadAfter = (j: string) => `coalesce($5::jsonb -> ${j}.id::text -> 'payload', ${j}.payload)`;

export function createReleaseQueries(s: string, channel: string, finished: string, events: string) {
  /**
   * Deletes the durable steps of the jobs `ids` (a select of ids) when `when` holds: a
   * completion that is not kept leaves nothing behind. Skipped at once when it does not hold
   * (a one-time filter on a parameter), so keeping completions costs it nothing.
   */
  const dropSteps = (when: string, ids: string) => `
    delete from ${s}.job_steps st where ${when} and st.job_id = any(array(${ids}))`;

  /** Releases the queues whose jobs a CTE named `released` returned, and wakes workers for them. */
  const unlockQueuesOf = (released: string, workerParam: string) => `
    unlocked as (
      update ${s}.job_queues q set locked_at = null, locked_by = null
      where q.locked_by = ${workerParam}
        and q.queue_name in (select queue_name from ${released} where queue_name is not null)
      returning q.queue_name
    ),
    woken as (select pg_notify('${channel}', '') from unlocked limit 1)`;

  /** releaseJobs (see its comment), telling the waiters itself (`tell`) or leaving that to a NOTIFY sent after its commit (releaseJobsQuiet). */
  const releaseJobs = (tell: boolean) => `
      with mine as materialized (
        select j.id, j.key, 'completed' as part from ${s}.jobs j where j.id = any($2::bigint[]) and ${heldUnder('j', '$1')}
        union all
        select j.id, j.key, 'failed' from ${s}.jobs j where j.id = any($4::bigint[]) and ${heldUnder('j', '$1')}
        union all
        select j.id, j.key, 'started' from ${s}.jobs j where j.id = any($6::bigint[]) and ${heldUnder('j', '$1')}
        union all
        select j.id, j.key, 'progress' from ${s}.jobs j where j.id = any($7::bigint[]) and ${heldUnder('j', '$1')}
      ),
      held as materialized (
        select j.id from ${s}.jobs j
        where j.id = any(array(select id from mine where key is not null)) and ${heldBy('j', '$1')}
        for no key update skip locked
      ),
      finished as (
        delete from ${s}.jobs j
        where j.id = any($2::bigint[] || $4::bigint[]) and ${heldUnder('j', '$1')} and (j.key is null or j.id in (select id from held))
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
        payload: `case when f.state = 'failed' then ${payloadAfter('f')} else f.payload end`,
        where: `f.state <> 'completed' or $9::boolean or f.flow_id is not null`,
      })}
      ),
      unkept as (${dropSteps(`not $9::boolean`, `select id from finished where state = 'completed'`)}),
      retried as (
        update ${s}.jobs j set
          last_error = ${failure('j', 'message')},
          errors = ${withError('j.errors', `jsonb_build_object('at', now(), 'attempt', j.attempts, 'message', ${failure('j', 'message')}, 'code', ${failure('j', 'code')})`)},
          progress = coalesce($8::jsonb -> j.id::text, j.progress),
          payload = ${payloadAfter('j')},
          first_run_at = coalesce(j.first_run_at, j.run_at),
          started_at = coalesce(j.started_at, now()),
          run_at = now() + (${failure('j', 'delay_ms')})::float8 * interval '1 millisecond',
          attempts = case when ${failure('j', 'code')} = 'JQ_JOB_SNOOZED' then greatest(j.attempts - 1, 0) else j.attempts end,
          locked_at = null, locked_by = null, updated_at = now()
        where j.id = any($4::bigint[]) and ${heldUnder('j', '$1')} and (j.key is null or j.id in (select id from held))
          and (j.attempts < j.max_attempts or ${failure('j', 'code')} = 'JQ_JOB_SNOOZED')
          and ${failure('j', 'code')} is distinct from 'JQ_JOB_FAILED_FOR_GOOD'
          and j.cancel_requested_at is null
        returning j.id, j.queue_name, j.task_identifier, j.attempts, j.max_attempts, j.created_at, j.run_at, j.last_error, ${failure('j', 'code')} as code
      ),
      touched as (
        update ${s}.jobs j set
          started_at = case when j.id in (select id from mine where part = 'started') then coalesce(j.started_at, now()) else j.started_at end,
          progress = coalesce($8::jsonb -> j.id::text, j.progress)
        where j.id = any($6::bigint[] || $7::bigint[]) and j.id not in (select id from mine where part in ('completed', 'failed'))
          and ${heldUnder('j', '$1')} and (j.key is null or j.id in (select id from held))
        returning j.id, j.queue_name, j.task_identifier, j.attempts, j.max_attempts, j.created_at, j.progress, j.id = any($7::bigint[]) as progressed
      ),
      published as (${publishEvents(
        events,
        `select ${queueEvent('job:completed', 'f', eventResult('($3::jsonb -> f.id::text)'))} from finished f
           where f.state = 'completed' and ${wantsEvent('$10', 'job:completed', 'f.task_identifier')}
         union all
         select ${queueEvent('job:failed', 'f', { error: eventText('f.message'), code: 'f.code' })} from finished f
           where f.state = 'failed' and ${wantsEvent('$10', 'job:failed', 'f.task_identifier')}
         union all
         select ${queueEvent('job:cancelled', 'f', { reason: eventText('f.cancel_reason') })} from finished f
           where f.state = 'cancelled' and ${wantsEvent('$10', 'job:cancelled', 'f.task_identifier')}
         union all
         select ${queueEvent('job:retrying', 'r', { error: eventText('r.last_error'), code: 'r.code', retryAt: epochMs('r.run_at') })} from retried r
           where ${wantsEvent('$10', 'job:retrying', 'r.task_identifier')}
         union all
         select ${queueEvent('job:progress', 't', { progress: 't.progress' })} from touched t
           where t.progressed and ${wantsEvent('$10', 'job:progress', 't.task_identifier')}`,
      )}),
      released as (select queue_name from finished union all select queue_name from retried),
      ${unlockQueuesOf('released', '$1')},
      ${tell ? `told as (${tellFinished(finished, 'finished')}),` : ''}
      busy as (
        select m.id from mine m
        where m.part in ('completed', 'failed') and m.id not in (select id from finished) and m.id not in (select id from retried)
      )
      select (select count(*) from released)::int as released, (select count(*) from woken)::int as woken,
             ${tell ? '(select count(*) from told)::int' : '0'} as told, (select count(*) from published)::int as published, array(select id::text from busy) as busy,
             (select coalesce(json_agg(json_build_object('id', id::text, 'reason', cancel_reason)), '[]') from finished where state = 'cancelled') as cancelled`;

  return {
    /**
     * One flush of the release batches for worker $1. Only rows this worker still holds are
     * touched: a job it lost (rescued after a stall, say) is not its to write.
     *
     * - Jobs that finish leave `jobs` for `finished_jobs` (`finished`, `kept`): the ones that
     *   succeeded ($2 ids; $3 their results, a jsonb object by id, holding those that returned
     *   something), the failures that were their last attempt, and any job whose cancel was
     *   requested, which ends `cancelled` whatever its handler did. A success is kept only if
     *   $9 (retention.completed is not 0) or it belongs to a flow (waitForFlow reads it; the
     *   insert also settles its flow: the trigger of migration Flows1764300000000); the others always are (the cleaner deletes what its
     *   retention says). A success not kept takes its durable steps (job_steps) along (`unkept`).
     * - The other failures ($4 ids; $5 a jsonb object by id of `{message, code, delay_ms}`) are
     *   unlocked with the error appended to `errors` (the latest MAX_KEPT_ERRORS kept), run_at
     *   moved (their queue place kept in first_run_at). A failure that brings a `payload` (a batch
     *   job's elements that failed) replaces the job's payload, kept or retried. Two codes steer the outcome (core/handler-outcomes.ts):
     *   JQ_JOB_FAILED_FOR_GOOD ends the job failed whatever attempts it has left; JQ_JOB_SNOOZED
     *   retries it with its attempt given back, even on its last one.
     * - Jobs still running get their start mark ($6: prefetched jobs whose handlers began
     *   since) and progress ($7 ids; $8 a jsonb object by id; a finishing job's last progress
     *   rides on its own row).
     * - Waiters (waitForJob) hear the finished ids on the finished channel: one NOTIFY per flush.
     * - Listeners of cluster-wide events hear what $10 (the merged filter of the live
     *   listeners, jsonb; null when there are none) wants: one NOTIFY per flush, or a few when
     *   they do not fit one (sql/queue-events.ts). With null, nothing is built.
     *
     * A keyed job can be row-locked by a caller for as long as the caller's transaction lasts
     * (add_job replacing it while it runs): the rows named here that this worker holds are
     * read once (`mine`), the keyed ones among them taken SKIP LOCKED (`held`), and those
     * someone holds come back in `busy` for a later flush, so that one lock holds up one job
     * and never the worker's others. So do the rare rows a concurrent cancel changed under
     * this statement. Keyless rows nobody locks for long: they are taken directly, which
     * spares the drain a lock record per job.
     *
     * It runs with its generic plan (JobQueueDatabase.runGenericPlan: planning it took more
     * than running a small flush), made without knowing how many ids a flush names and with
     * whatever statistics `jobs` has. Hence its shape: every part reaches `jobs` by primary key from an
     * array of ids (`id = any`, `heldBy`), and takes each job's outcome from a jsonb object by
     * id or a hashed set, never from a join. A join to a list of outcomes was planned as a
     * nested loop over the list per row (quadratic), or as a scan of every job the worker
     * holds, or of the whole table when the statistics said it was empty
     * (test/worker/release-plan.test.ts).
     */
    releaseJobs: releaseJobs(true),
    /**
     * releaseJobs without the NOTIFY to waiters: the worker sends that after the commit, in a
     * transaction of its own (JobQueueDatabase.runGenericPlan, `after`; sql/notify-after.ts).
     * `told` is 0.
     */
    releaseJobsQuiet: releaseJobs(false),

    /**
     * Completes job $2 of worker $1 inside the handler's own transaction (a `transaction: true`
     * task), so that the handler's writes and the completion commit together. Only if this
     * worker still holds the job and no cancel was requested: no row back means it was rescued
     * (after a stall) or cancelled (then `cancelled`), and the caller rolls everything back. $3 result (json
     * text), $4 the last progress not written yet (json text), $5 keep completed jobs
     * (retention.completed is not 0), $6 the listeners' filter (see releaseJobs). Frees the
     * job's named queue, tells waiters and publishes its event, all heard at the commit.
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
        where: '$5::boolean or f.flow_id is not null',
      })}
      ),
      unkept as (${dropSteps('not $5::boolean', 'select id from finished')}),
      ${unlockQueuesOf('finished', '$1')},
      told as (${tellFinished(finished, 'finished')}),
      published as (${publishEvents(
        events,
        `select ${queueEvent('job:completed', 'f', eventResult('$3::jsonb'))} from finished f where ${wantsEvent('$6', 'job:completed', 'f.task_identifier')}`,
      )})
      select (select count(*) from finished)::int as completed, (select count(*) from woken)::int as woken,
             (select count(*) from told)::int as told, (select count(*) from published)::int as published,
             exists (select 1 from ${s}.jobs where id = $2::bigint and locked_by = $1 and cancel_requested_at is not null) as cancelled`,
  };
}
