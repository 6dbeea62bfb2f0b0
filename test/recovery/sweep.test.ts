import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Client } from 'pg';
import { JobQueueMaintenance, type JobQueueEvent } from '../../libs/job-queue/src';
import { JobQueueDatabase } from '../../libs/job-queue/src/db/job-queue-database';
import { MAX_KEPT_ERRORS } from '../../libs/job-queue/src/sql/finished';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

/**
 * The maintenance sweep, driven by hand (`runOnce`) on rows made to look like what dead,
 * slow, vanished and live workers leave behind.
 */
describe('the dead-worker sweep', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp;
  let maintenance: JobQueueMaintenance;
  const events: JobQueueEvent[] = [];

  before(async () => {
    db = await createTestDatabase('sweep');
    sql = await connect(db.url);
    // worker: false: nothing claims or sweeps unless the test says so
    t = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: '*' } });
    maintenance = t.app.get(JobQueueMaintenance);
    t.worker.events$.subscribe((e) => events.push(e));
  });
  beforeEach(async () => {
    events.length = 0;
    await sql.query('delete from job_queue.jobs; delete from job_queue.workers; delete from job_queue.job_queues; delete from job_queue.leases');
  });
  after(async () => {
    await t.close();
    await sql.end();
    await db.drop();
  });

  /** Adds a job and makes it look held by `worker` since `lockedAgo`, started or only claimed. */
  async function held(worker: string, { started = true, lockedAgo = '1 hour', maxAttempts = 25, queue = null as string | null } = {}) {
    const [added] = (
      await sql.query(`select id from job_queue.add_job('work', queue_name => $1, max_attempts => $2, run_at => now() - interval '2 hours')`, [queue, maxAttempts])
    ).rows;
    const { rows } = await sql.query(
      `update job_queue.jobs j set attempts = 1, locked_by = $1, locked_at = now() - $2::interval, started_at = case when $3 then now() - $2::interval end
       where j.id = $4 returning j.id::text, j.run_at`,
      [worker, lockedAgo, started, added.id],
    );
    if (queue) await sql.query(`update job_queue.job_queues set locked_by = $1, locked_at = now() - $2::interval where queue_name = $3`, [worker, lockedAgo, queue]);
    return rows[0] as { id: string; run_at: Date };
  }
  const row = async (id: string) =>
    (await sql.query(
      `select attempts, max_attempts, locked_by, started_at, last_error, run_at, first_run_at, is_available from job_queue.jobs where id = $1`,
      [id],
    )).rows[0];
  /** A round of maintenance that must not wait on any lock: fails at once if the sweep does, rather than hanging with it. */
  async function sweepWithoutWaiting() {
    let swept = false;
    const sweep = maintenance.runOnce().then(() => (swept = true));
    await waitFor('the sweep to return', async () => {
      if (swept) return true;
      const { rows } = await sql.query(`select count(*)::int as n from pg_stat_activity where query like '%with doomed as%' and wait_event_type = 'Lock'`);
      assert.equal(rows[0].n, 0, 'the sweep waits on a lock');
      return false;
    });
    await sweep;
  }
  const finishedRow = async (id: string) =>
    (await sql.query(`select state, attempts, max_attempts, last_error, errors from job_queue.finished_jobs where id = $1`, [id])).rows[0];

  it('releases what dead and vanished workers held, by each worker\'s own timeout, charging only started jobs', async () => {
    await sql.query(`insert into job_queue.workers (id, heartbeat_at, timeout_ms) values
      ('dead', now() - interval '1 hour', 20000),
      ('slow', now() - interval '40 seconds', 60000),
      ('live', now(), 20000)`);
    const startedJob = await held('dead', { queue: 'billing' });
    const nextInQueue = (await sql.query(`select id::text from job_queue.add_job('work', queue_name => 'billing')`)).rows[0];
    const prefetched = await held('dead', { started: false });
    const lastAttempt = await held('dead', { maxAttempts: 1 });
    const vanished = await held('ghost'); // a lock whose worker has no row at all
    const recentGhost = await held('ghost-2', { lockedAgo: '0 seconds' }); // its claim may still be committing
    const slowJob = await held('slow'); // 40 s without a heartbeat, but its own timeout is 60 s
    const liveJob = await held('live');

    await maintenance.runOnce();
    assert.equal(maintenance.isLeader, true);

    const s = await row(startedJob.id);
    assert.equal(s.locked_by, null);
    assert.equal(s.started_at, null);
    assert.equal(s.attempts, 1, 'the started attempt counts');
    assert.equal(s.last_error, 'JQ_WORKER_LOST: worker dead stopped heartbeating while it ran the job');
    assert.deepEqual(s.first_run_at, startedJob.run_at, 'its place in its queue is kept');
    assert.ok(s.run_at.getTime() > Date.now(), 'retried after the backoff');
    const p = await row(prefetched.id);
    assert.deepEqual([p.locked_by, p.attempts, p.last_error, p.run_at], [null, 0, null, prefetched.run_at], 'a prefetched job goes back as it was');
    // out of attempts: failed for good, moved to finished_jobs by the same round's leftover step
    assert.equal(await row(lastAttempt.id), undefined, 'gone from jobs');
    const l = await finishedRow(lastAttempt.id);
    assert.deepEqual([l.state, l.attempts, l.max_attempts], ['failed', 1, 1], 'out of attempts: failed for good');
    assert.match(l.last_error, /^JQ_WORKER_LOST/);
    assert.deepEqual(
      l.errors.map((e: { attempt: number; code: string; message: string; at: string }) => [e.attempt, e.code, e.message, typeof e.at]),
      [[1, 'JQ_WORKER_LOST', l.last_error, 'string']],
    );
    assert.deepEqual([(await row(vanished.id)).locked_by, (await row(vanished.id)).attempts], [null, 1]);
    assert.equal((await row(recentGhost.id)).locked_by, 'ghost-2', 'a fresh lock of an unknown worker is left alone');
    assert.equal((await row(slowJob.id)).locked_by, 'slow', 'judged by its own timeout');
    assert.equal((await row(liveJob.id)).locked_by, 'live');
    assert.deepEqual((await sql.query('select id from job_queue.workers order by id')).rows.map((r) => r.id), ['live', 'slow']);
    assert.deepEqual((await sql.query(`select locked_by from job_queue.job_queues where queue_name = 'billing'`)).rows, [{ locked_by: null }]);

    const rescued = events.filter((e) => e.type === 'job:rescued');
    assert.deepEqual(
      rescued.map((e) => e.type === 'job:rescued' && [e.jobId, e.deadWorkerId, e.started, e.failed]).sort(),
      [
        [startedJob.id, 'dead', true, false],
        [prefetched.id, 'dead', false, false],
        [lastAttempt.id, 'dead', true, true],
        [vanished.id, 'ghost', true, false],
      ].sort(),
    );
    // the queue's next job waits behind its head's retry; the prefetched job is free to run again
    const claimed = await t.app.get(JobQueueDatabase).run<{ id: string }>('claimJobs', [['work'], [], 10, 'live', 10, []]);
    assert.deepEqual(claimed.map((j) => j.id), [prefetched.id], `not ${nextInQueue.id}, which waits behind its queue's head`);
  });

  it(`records the lost attempt after the latest ${MAX_KEPT_ERRORS - 1} errors a job had, whether it is retried or fails for good`, async () => {
    await sql.query(`insert into job_queue.workers (id, heartbeat_at) values ('dead', now() - interval '1 hour')`);
    const retried = await held('dead');
    const lastAttempt = await held('dead', { maxAttempts: 30 });
    // 30 earlier failures each, as a job written before errors were capped may have
    const earlier = Array.from({ length: 30 }, (_, i) => ({ at: new Date(0).toISOString(), attempt: i + 1, message: `failure ${i + 1}`, code: null }));
    await sql.query('update job_queue.jobs set errors = $1::jsonb, attempts = 30 where id = any($2::bigint[])', [
      JSON.stringify(earlier),
      [retried.id, lastAttempt.id],
    ]);
    await sql.query('update job_queue.jobs set max_attempts = 40 where id = $1', [retried.id]);

    await maintenance.runOnce();
    const entries = (errors: Array<{ attempt: number; message: string }>) => errors.map((e) => [e.attempt, e.message]);
    const expected = (lost: string) => [...earlier.slice(-(MAX_KEPT_ERRORS - 1)).map((e) => [e.attempt, e.message]), [30, lost]];
    const { rows } = await sql.query('select locked_by, last_error, errors from job_queue.jobs where id = $1', [retried.id]);
    assert.equal(rows[0].locked_by, null, 'rescued');
    assert.deepEqual(entries(rows[0].errors), expected(rows[0].last_error), 'retried: in jobs');
    const failed = await finishedRow(lastAttempt.id);
    assert.equal(failed.state, 'failed');
    assert.deepEqual(entries(failed.errors), expected(failed.last_error), 'failed for good: in finished_jobs');
  });

  it('never waits on a row a caller holds: that job is released by a later sweep', async () => {
    await sql.query(`insert into job_queue.workers (id, heartbeat_at) values ('dead', now() - interval '1 hour')`);
    const job = await held('dead');
    const caller = await connect(db.url);
    try {
      await caller.query('begin');
      await caller.query('select 1 from job_queue.jobs where id = $1 for update', [job.id]);
      await maintenance.runOnce(); // returns, rather than waiting for the caller
      assert.equal((await row(job.id)).locked_by, 'dead');
      await caller.query('commit');
    } finally {
      await caller.end();
    }
    await maintenance.runOnce(); // the worker row is gone by now: the orphan rule takes the job
    assert.equal((await row(job.id)).locked_by, null);
  });

  /** A heartbeat of worker `id` whose transaction stays open (a worker frozen between its Execute and Sync): its row stays locked. */
  async function openHeartbeat(id: string): Promise<Client> {
    const client = await connect(db.url);
    await client.query('begin');
    await client.query('update job_queue.workers set heartbeat_at = now() where id = $1', [id]);
    return client;
  }

  it('a worker whose row someone has locked (a heartbeat whose transaction stays open) holds up neither the sweep nor the rescue of the others', async () => {
    await sql.query(`insert into job_queue.workers (id, heartbeat_at) values ('dead-1', now() - interval '1 hour'), ('frozen', now() - interval '1 hour')`);
    const job = await held('dead-1');
    const frozenJob = await held('frozen');
    // What a worker frozen between its heartbeat's Execute and Sync leaves on the server: the
    // update ran, its implicit transaction stays open, and the row stays locked.
    const frozen = await openHeartbeat('frozen');
    try {
      await sweepWithoutWaiting();
      assert.equal((await row(job.id)).locked_by, null, 'the other dead worker\'s job was rescued');
      assert.equal((await row(frozenJob.id)).locked_by, 'frozen', 'the locked worker is left for a later sweep');
      assert.deepEqual((await sql.query('select id from job_queue.workers order by id')).rows, [{ id: 'frozen' }]);
    } finally {
      // its connection dies: the server rolls the heartbeat back, and the row is stale again
      await frozen.end();
    }
    await maintenance.runOnce();
    const r = await row(frozenJob.id);
    assert.deepEqual([r.locked_by, r.attempts], [null, 1]);
    assert.match(r.last_error, /^JQ_WORKER_LOST: worker frozen stopped heartbeating/);
    assert.deepEqual((await sql.query('select id from job_queue.workers')).rows, []);
  });

  it('a worker whose frozen heartbeat commits after all is alive, and keeps its jobs', async () => {
    await sql.query(`insert into job_queue.workers (id, heartbeat_at) values ('frozen', now() - interval '1 hour')`);
    const frozenJob = await held('frozen');
    const frozen = await openHeartbeat('frozen');
    try {
      await sweepWithoutWaiting();
      await frozen.query('commit'); // the process resumed and sent its Sync
    } finally {
      await frozen.end();
    }
    await maintenance.runOnce();
    assert.equal((await row(frozenJob.id)).locked_by, 'frozen');
    assert.deepEqual((await sql.query('select id from job_queue.workers')).rows, [{ id: 'frozen' }]);
  });

  it('a sweep that comes late leaves alone a job another worker has claimed again', async () => {
    // dead-1 held the job. A late sweep takes its snapshot, then is held up (here: by a
    // trigger of the test's that waits on an advisory lock while the sweep deletes dead-2's
    // row); meanwhile a new worker registers and claims the job.
    await sql.query(`insert into job_queue.workers (id, heartbeat_at) values ('dead-1', now() - interval '1 hour'), ('dead-2', now() - interval '1 hour')`);
    const job = await held('dead-1');
    await sql.query(`
      create function hold_up_sweep() returns trigger language plpgsql as $$
      begin
        if old.id = 'dead-2' then perform pg_advisory_xact_lock(4242); end if;
        return old;
      end $$`);
    await sql.query('create trigger hold_up before delete on job_queue.workers for each row execute function hold_up_sweep()');
    const blocker = await connect(db.url);
    const lateSweeper = await connect(db.url);
    try {
      await blocker.query('select pg_advisory_lock(4242)');
      const queries = t.app.get(JobQueueDatabase).sql;
      const late = lateSweeper.query(queries.rescueJobs, [1000, 20000, null]);
      await waitFor('the late sweep to be held up', async () =>
        (await sql.query(`select count(*)::int as n from pg_stat_activity where query like '%with doomed as%' and wait_event_type = 'Lock'`)).rows[0].n === 1,
      );
      // a worker that registered after the late sweep's snapshot claims the job again
      await sql.query(`insert into job_queue.workers (id) values ('alive')`);
      await sql.query(`update job_queue.jobs set locked_by = 'alive', locked_at = now(), attempts = attempts + 1, started_at = now() where id = $1`, [job.id]);
      await blocker.query('select pg_advisory_unlock(4242)');
      const [result] = (await late).rows;
      assert.deepEqual(result.rescued, [], 'the late sweep rescued nothing');
      assert.deepEqual(result.dead.sort(), ['dead-1', 'dead-2']);
    } finally {
      await blocker.end();
      await lateSweeper.end();
      await sql.query('drop trigger if exists hold_up on job_queue.workers; drop function if exists hold_up_sweep()');
    }
    const r = await row(job.id);
    assert.deepEqual([r.locked_by, r.attempts, r.last_error], ['alive', 2, null]);
  });

  it('deletes idle queue rows, keeps busy ones, and a queue whose row went still runs', async () => {
    await sql.query(`insert into job_queue.job_queues (queue_name) select 'idle-' || n from generate_series(1, 30) n`);
    await sql.query(`select job_queue.add_job('work', queue_name => 'waiting')`);
    await sql.query(`insert into job_queue.workers (id) values ('live')`);
    await held('live', { queue: 'running' });
    await maintenance.runOnce();
    assert.deepEqual((await sql.query('select queue_name from job_queue.job_queues order by 1')).rows.map((r) => r.queue_name), ['running', 'waiting']);

    // the cleaner raced an add (simulated: the row of a queue with a waiting job is gone): the claim makes the row again
    await sql.query(`delete from job_queue.job_queues where queue_name = 'waiting'`);
    const claimed = await t.app.get(JobQueueDatabase).run<{ id: string; queue_name: string }>('claimJobs', [['work'], [], 10, 'live', 10, []]);
    assert.deepEqual(claimed.map((j) => j.queue_name), ['waiting']);
    assert.deepEqual((await sql.query(`select locked_by from job_queue.job_queues where queue_name = 'waiting'`)).rows, [{ locked_by: 'live' }]);
  });
});
