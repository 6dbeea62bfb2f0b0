import { cancelledError, keepFinished, tellFinished, withError } from './finished';
import { epochMs, eventText, publishEvents, queueEvent, wantsEvent } from './queue-events';

/** The maintenance leader's lease: its name in the `leases` table (takeLease, dropLease, readLease). */
export const MAINTENANCE_LEASE = 'maintenance';

/**
 * The statements of the cluster's upkeep (maintenance/): the leader's lease, the sweep
 * that rescues a dead worker's jobs, and the cleanup of idle queue rows. Each is safe if two
 * replicas ever run it at once, and none waits on a row lock someone else holds.
 * `s` is the quoted schema, `channel` the jobs channel, `finished` the finished channel,
 * `events` the events channel.
 */
export function createMaintenanceQueries(s: string, channel: string, finished: string, events: string) {
  /** A worker row whose heartbeat is older than its own timeout. A restart of the server counts as a heartbeat: no one could send one while it was down. */
  const isDead = (w: string) =>
    `greatest(${w}.heartbeat_at, pg_postmaster_start_time()) < now() - ${w}.timeout_ms * interval '1 millisecond'`;
  /**
   * A lock whose worker has no row at all, held for longer than $2 ms: the worker was
   * declared dead while its claim was in flight, or its row went some other way. The margin
   * keeps a claim that commits during this statement (its worker registered after the
   * statement's snapshot) from looking orphaned.
   */
  /** The error of an attempt a dead worker was running, for its row `r` and the lost row `l` (worker_id). */
  const lostError = (l: string) => `'JQ_WORKER_LOST: worker ' || ${l}.worker_id || ' stopped heartbeating while it ran the job'`;
  const withLostAttempt = (j: string, l: string) =>
    withError(`${j}.errors`, `jsonb_build_object('at', now(), 'attempt', ${j}.attempts, 'code', 'JQ_WORKER_LOST', 'message', ${lostError(l)})`);
  const isOrphaned = (alias: string) =>
    `(${alias}.locked_at < now() - $2 * interval '1 millisecond' and not exists (select 1 from ${s}.workers w where w.id = ${alias}.locked_by))`;

  return {
    /**
     * Takes or renews lease $1 for holder $2 until $3 ms from now, on the database's clock.
     * A row back means $2 holds it. A stalled holder loses it once it expires, unlike a
     * session advisory lock, which it would keep for as long as its connection lives.
     */
    takeLease: `
      insert into ${s}.leases as l (name, holder, expires_at) values ($1, $2, now() + $3 * interval '1 millisecond')
      on conflict (name) do update set holder = excluded.holder, expires_at = excluded.expires_at
      where l.holder = excluded.holder or l.expires_at < now()
      returning l.holder`,

    /**
     * Row versions of `jobs` that died since its last vacuum (the statistics' count, about a
     * second behind), how many vacuums it had (any, autovacuum's too), and whether this role may VACUUM the table, by the server's own rule:
     * up to PostgreSQL 16 the table's owner (or a member of the owner's role; a superuser may
     * anything), from 17 on a role with the MAINTAIN privilege on it (the owner has it unless
     * revoked; so has pg_maintain), and on every version the database's owner. The CASE keeps
     * 'MAINTAIN', unknown before 17, from being evaluated there.
     */
    jobsVacuumState: `
      select pg_stat_get_dead_tuples(c.oid)::float8 as dead_rows, pg_stat_get_live_tuples(c.oid)::float8 as live_rows,
        (pg_stat_get_vacuum_count(c.oid) + pg_stat_get_autovacuum_count(c.oid))::float8 as vacuums,
        case when current_setting('server_version_num')::int >= 170000 then has_table_privilege(c.oid, 'MAINTAIN')
          else pg_has_role(c.relowner, 'USAGE') end
        or pg_has_role((select d.datdba from pg_database d where d.datname = current_database()), 'USAGE') as may_vacuum
      from pg_class c where c.oid = '${s}.jobs'::regclass`,

    /** $1 lease, $2 holder: lets another replica take it at once (at shutdown). */
    dropLease: `delete from ${s}.leases where name = $1 and holder = $2`,

    /**
     * $1 lease: who holds it, until when, and whether that is still ahead on the database's
     * clock (an expired row stays until someone takes the lease). No row: no one ever took it,
     * or its last holder gave it up. For operators (the CLI's status).
     */
    readLease: `
      select l.holder, l.expires_at, l.expires_at > now() as live,
             extract(epoch from l.expires_at - now())::float8 as expires_in
      from ${s}.leases l where l.name = $1`,

    /**
     * The sweep, in one statement: deletes the rows of dead workers, and releases up to $1
     * of the jobs that dead or orphaned workers hold, and their queues. A job whose handler
     * had started counts the attempt as failed, with JQ_WORKER_LOST in last_error, and is
     * retried after the default backoff (or fails for good if that was its last attempt: the
     * leftover step then moves it to finished_jobs); a job whose cancel was requested is left
     * for that step too (the claim skips it); a
     * job only claimed (prefetched) goes back as it was, its attempt returned. A queue is
     * freed once none of its worker's jobs in it is left locked. Rows someone has locked
     * are skipped: the next sweep takes them, by the orphan rule. Other workers are woken.
     * $2 is the orphan margin in ms; $3 the queue-event listeners' filter (see releaseJobs):
     * a started job's lost attempt is published as job:retrying or job:failed (JQ_WORKER_LOST),
     * a cancel it completes as job:cancelled.
     *
     * A dead worker's own row is skipped too while someone has it locked (`doomed`): the
     * sweep would otherwise wait for that lock, and with it every rescue in the cluster (the
     * leader's heartbeats and lease renewals queue behind it on the pinned connection, and
     * the next leader's sweep waits on the same row). Who locks a worker's row: the worker's
     * own heartbeat, for the moment it runs, or for as long as its transaction stays open if
     * the process froze between the statement's Execute and its Sync (pg before 8.14.1
     * writes them apart; the server then holds the implicit transaction, and
     * idle_in_transaction_session_timeout does not apply to it); or a caller's transaction.
     * Such a worker is declared dead, and its jobs released, by the first sweep after the
     * lock is gone: if its heartbeat committed, it is alive and keeps them.
     */
    rescueJobs: `
      with doomed as materialized (
        select w.id from ${s}.workers w where ${isDead('w')}
        for update of w skip locked
      ),
      dead as (
        delete from ${s}.workers w using doomed d where w.id = d.id returning w.id
      ),
      lost as materialized (
        select j.id, j.locked_by as worker_id, j.started_at is not null as started,
          j.cancel_requested_at is not null as cancel_requested, j.attempts >= j.max_attempts as last_attempt
        from ${s}.jobs j
        where j.locked_by is not null and (j.locked_by in (select id from dead) or ${isOrphaned('j')})
        order by j.id
        limit $1
        for no key update of j skip locked
      ),
      rescued as (
        update ${s}.jobs j set
          attempts = case when l.started then j.attempts else greatest(j.attempts - 1, 0) end,
          last_error = case when l.started then ${lostError('l')} else j.last_error end,
          errors = case when l.started then ${withLostAttempt('j', 'l')} else j.errors end,
          first_run_at = case when l.started then coalesce(j.first_run_at, j.run_at) else j.first_run_at end,
          run_at = case when l.started then now() + exp(least(10, j.attempts)) * interval '1 second' else j.run_at end,
          locked_at = null, locked_by = null, started_at = null, updated_at = now()
        from lost l
        where j.id = l.id and not l.cancel_requested and not (l.started and l.last_attempt)
        returning j.id, j.task_identifier, l.worker_id, l.started, false as failed,
          j.queue_name, j.attempts, j.max_attempts, j.created_at, j.run_at, j.last_error
      ),
      -- Done for good: a started job on its last attempt fails, a job whose cancel was requested
      -- ends cancelled; both move to finished_jobs now, which frees their keys.
      ended as (
        delete from ${s}.jobs j using lost l
        where j.id = l.id and (l.cancel_requested or (l.started and l.last_attempt))
        returning j.*, l.worker_id, l.started, l.cancel_requested
      ),
      kept as (${keepFinished(s, 'ended e', {
        state: `case when e.cancel_requested then 'cancelled' else 'failed' end`,
        lastError: `case when e.cancel_requested then ${cancelledError('e')} else ${lostError('e')} end`,
        errors: `case when e.cancel_requested then e.errors else ${withLostAttempt('e', 'e')} end`,
        attempts: `case when e.cancel_requested and not e.started then greatest(e.attempts - 1, 0) else e.attempts end`,
        workerId: 'e.worker_id',
      })}
      ),
      told as (${tellFinished(finished, 'ended')}),
      freed_queues as (
        update ${s}.job_queues q set locked_at = null, locked_by = null
        where q.queue_name in (
          select f.queue_name from ${s}.job_queues f
          where f.locked_by is not null
            and (f.locked_by in (select id from dead) or ${isOrphaned('f')})
            and not exists (
              select 1 from ${s}.jobs j
              where j.queue_name = f.queue_name and j.locked_by = f.locked_by
                and j.id not in (select id from rescued) and j.id not in (select id from ended))
          for no key update skip locked)
        returning q.queue_name
      ),
      woken as (
        select pg_notify('${channel}', '') from (select 1 from rescued union all select 1 from freed_queues) changed limit 1
      ),
      published as (${publishEvents(
        events,
        `select ${queueEvent('job:retrying', 'r', { error: eventText('r.last_error'), code: `'JQ_WORKER_LOST'`, retryAt: epochMs('r.run_at') })} from rescued r
           where r.started and ${wantsEvent('$3', 'job:retrying', 'r.task_identifier')}
         union all
         select ${queueEvent('job:failed', 'e', { error: lostError('e'), code: `'JQ_WORKER_LOST'` })} from ended e
           where not e.cancel_requested and ${wantsEvent('$3', 'job:failed', 'e.task_identifier')}
         union all
         select ${queueEvent('job:cancelled', 'e', { reason: eventText('e.cancel_reason') })} from ended e
           where e.cancel_requested and ${wantsEvent('$3', 'job:cancelled', 'e.task_identifier')}`,
      )}),
      released as (
        select id, task_identifier, worker_id, started, failed from rescued
        union all
        select id, task_identifier, worker_id, started, not cancel_requested from ended
      )
      select
        (select coalesce(json_agg(json_build_object(
          'id', id::text, 'taskIdentifier', task_identifier, 'workerId', worker_id, 'started', started, 'failed', failed)), '[]')
         from released) as rescued,
        array(select id from dead) as dead,
        (select count(*) from freed_queues)::int as freed_queues,
        (select count(*) from woken)::int as woken,
        (select count(*) from published)::int as published`,

    /**
     * Deletes up to $1 queue rows that no worker holds and no available job names, so that
     * per-customer queues do not pile up. Safe against a concurrent add: the claim creates
     * a queue's row again when it needs to lock it.
     */
    deleteIdleQueues: `
      with idle as (
        select q.queue_name from ${s}.job_queues q
        where q.locked_at is null
          and not exists (select 1 from ${s}.jobs j where j.queue_name = q.queue_name and j.is_available)
        limit $1
        for update skip locked
      )
      delete from ${s}.job_queues q using idle where q.queue_name = idle.queue_name
      returning q.queue_name`,

    /**
     * Moves up to $1 done-but-unfinished rows to finished_jobs (jobs_leftover_idx finds them):
     * out of attempts with no worker holding them (a rescue's last attempt, an admin call, a
     * worker of the previous version), or cancelled while a worker held them and let go
     * since (a give-back, a rescue). Tells waiters.
     */
    finishLeftovers: `
      with leftovers as (
        select id from ${s}.jobs
        where locked_at is null and (attempts >= max_attempts or cancel_requested_at is not null)
        order by id
        limit $1
        for update skip locked
      ),
      moved as (
        delete from ${s}.jobs j using leftovers l where j.id = l.id returning j.*
      ),
      kept as (${keepFinished(s, 'moved m', {
        state: `case when m.cancel_requested_at is not null then 'cancelled' else 'failed' end`,
        lastError: `case when m.cancel_requested_at is not null then ${cancelledError('m')} else m.last_error end`,
        workerId: 'null',
      })}
      ),
      told as (${tellFinished(finished, 'moved')})
      select (select count(*) from moved)::int as moved, (select count(*) from told)::int as told`,

    /**
     * Retention: deletes up to $3 finished jobs in state $1 that finished more than $2 ms ago,
     * oldest first, walking finished_jobs_state_idx; rows someone has locked are skipped, and so
     * are the jobs of a flow still running (a flow's jobs stay together until it ends). Their
     * durable steps (job_steps) go with them.
     */
    deleteExpiredJobs: `
      with expired as (
        select f.id from ${s}.finished_jobs f
        where f.state = $1 and f.finished_at < now() - $2::float8 * interval '1 millisecond'
          and (f.flow_id is null or not exists (select 1 from ${s}.flows fl where fl.id = f.flow_id and fl.state = 'running'))
        order by f.finished_at
        limit $3
        for update skip locked
      ),
      deleted as (delete from ${s}.finished_jobs f using expired e where f.id = e.id returning f.id),
      steps as (delete from ${s}.job_steps st where st.job_id = any(array(select id from deleted)))
      select count(*)::int as deleted from deleted`,

  };
}
