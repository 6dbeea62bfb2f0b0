import { cancelledError, keepFinished, tellFinished } from './finished';

/**
 * The statements about a worker itself: its row (registration, heartbeat, leaving), and
 * giving back the jobs it holds. `s` is the quoted schema, `channel` the jobs channel,
 * `finished` the finished channel.
 */
export function createWorkerQueries(s: string, channel: string, finished: string) {
  return {
    /**
     * $1 worker id, $2 its timeout in ms (how long the sweep waits after its last heartbeat),
     * $3 host name, $4 process id, $5 concurrency: for the dashboard's list of workers.
     */
    registerWorker: `
      insert into ${s}.workers (id, timeout_ms, hostname, pid, concurrency) values ($1, $2, $3, $4, $5)
      on conflict (id) do update set heartbeat_at = now(), timeout_ms = excluded.timeout_ms`,

    /**
     * $1 worker id. No row back: the worker was declared dead (and its jobs rescued). With the
     * row, the jobs it holds whose cancel was requested: the catch-up for a lost notification.
     */
    heartbeatWorker: `
      update ${s}.workers set heartbeat_at = now() where id = $1
      returning id, array(select j.id::text from ${s}.jobs j where j.locked_by = $1 and j.cancel_requested_at is not null) as cancelled`,

    /** $1 worker id */
    unregisterWorker: `delete from ${s}.workers where id = $1`,

    /**
     * Gives back the jobs worker $1 holds, except the ids $2, with the attempt each used
     * returned, and frees their queues. At shutdown $2 are the handlers still running after
     * the abort (kept, so that nothing runs them twice); after a claim whose reply was lost,
     * $2 are the jobs the worker knows it holds. By worker rather than by id, so that a
     * claim whose reply was lost is given back too (jobs_locked_by_idx finds the rows).
     * A row someone else has locked (a caller replacing a keyed job in an open transaction)
     * is skipped and listed in `busy`: the caller may retry, or leave it to the sweep's
     * orphan rule once the worker's row is gone. A queue stays locked while any job of this
     * worker in it is still locked (kept or skipped), so its order holds.
     */
    giveBackJobs: giveBack(s, channel, finished, 'not (id = any($2::bigint[]))'),

    /**
     * Gives back the jobs $2 that worker $1 holds, as giveBackJobs does: the prefetched jobs of a
     * task or named queue paused (or held) since they were claimed (worker/paused-give-back.ts),
     * which the worker no longer starts.
     */
    giveBackJobsById: giveBack(s, channel, finished, 'id = any($2::bigint[])'),
  };
}

/**
 * Gives back the jobs worker $1 holds that `which` picks (a condition on their id and $2): see
 * giveBackJobs.
 */
function giveBack(s: string, channel: string, finished: string, which: string): string {
  return `
      with mine as materialized (
        select id from ${s}.jobs
        where locked_by = $1 and ${which}
        for no key update skip locked
      ),
      given_back as (
        update ${s}.jobs j set
          attempts = greatest(j.attempts - 1, 0), locked_at = null, locked_by = null, started_at = null, updated_at = now()
        from mine where j.id = mine.id and j.cancel_requested_at is null
        returning j.id
      ),
      -- A job whose cancel was requested is not given back but finished, cancelled: its key is free at once.
      cancelled as (
        delete from ${s}.jobs j using mine where j.id = mine.id and j.cancel_requested_at is not null returning j.*
      ),
      kept as (${keepFinished(s, 'cancelled c', {
        state: `'cancelled'`,
        lastError: cancelledError('c'),
        attempts: 'case when c.started_at is null then greatest(c.attempts - 1, 0) else c.attempts end',
        workerId: '$1',
      })}
      ),
      told as (${tellFinished(finished, 'cancelled')}),
      unlocked as (
        update ${s}.job_queues q set locked_at = null, locked_by = null
        where q.locked_by = $1
          and not exists (
            select 1 from ${s}.jobs j
            where j.queue_name = q.queue_name and j.locked_by = $1
              and j.id not in (select id from given_back) and j.id not in (select id from cancelled))
      ),
      woken as (select pg_notify('${channel}', '') from given_back limit 1)
      select array(select id::text from given_back) as given_back,
             array(select id::text from ${s}.jobs where locked_by = $1 and ${which} and id not in (select id from mine)) as busy,
             (select count(*) from woken)::int as woken`;
}
