import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { connect, createTestDatabase } from '../support/database';
import { allow as allowFlag, CREATE_FORBIDDEN_FLAGS, forbid as forbidFlag } from '../support/forbidden-flags';
import { waitFor, waitForValue } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses, type WorkerProcess } from '../support/worker-processes';

const ENV = { HEARTBEAT_INTERVAL: '250', WORKER_TIMEOUT: '2000', FLAGS_TABLE: '1' };

/**
 * A worker stalls past its timeout (SIGSTOP, as a long GC pause or a frozen VM would) while
 * running a job whose handler ignores its signal. The cluster declares it dead and runs the
 * job elsewhere; once it resumes, it must write nothing for that job and never claim under
 * its old id. Flags steer which process claims what (FLAGS_TABLE, see worker-process.ts).
 */
describe('a stalled worker', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('stalled');
    sql = await connect(db.url);
    await sql.query('create table runs (job_id bigint not null, pid int not null, attempt int not null)');
    await sql.query(CREATE_FORBIDDEN_FLAGS);
    await sql.query('create table handler_events (job_id bigint not null, pid int not null, event text not null, code text)');
  });
  afterEach(async () => {
    await stopWorkerProcesses();
    await sql.query('truncate runs, forbidden_flags, handler_events');
    await sql.query('delete from job_queue.jobs');
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  const leaseHolder = async () => (await sql.query(`select holder from job_queue.leases where name = 'maintenance' and expires_at > now()`)).rows[0]?.holder;
  // forbid() resolves once the process has read the flag: no claim of it can take a job added after (see forbidden-flags.ts)
  const forbid = (worker: WorkerProcess, flag: string) => forbidFlag(sql, worker, flag);
  const allow = (worker: WorkerProcess, flag: string) => allowFlag(sql, worker, flag);

  async function stallAndResume(victim: WorkerProcess, other: WorkerProcess) {
    const oldId = victim.workerId!;
    // a 4-second job only the victim may claim, with a handler that ignores its signal
    await forbid(other, 'pinned');
    const [job] = (await sql.query(`select id::text from job_queue.add_job('sleep', '{"ms": 4000}', flags => '{pinned}')`)).rows;
    await victim.waitForOutput('the victim to start the job', new RegExp(`started sleep ${job.id}\\b`));
    await allow(other, 'pinned');

    victim.pause();
    await waitFor('the other worker to run the job', () => new RegExp(`started sleep ${job.id}\\b`).test(other.output));
    const otherId = other.workerId!;
    const { rows: taken } = await sql.query('select locked_by, attempts, last_error from job_queue.jobs where id = $1', [job.id]);
    assert.equal(taken[0].locked_by, otherId);
    assert.equal(taken[0].attempts, 2, 'the stalled attempt counted');
    assert.match(taken[0].last_error, /^JQ_WORKER_LOST: worker \S+ stopped heartbeating/);
    assert.equal((await sql.query('select count(*)::int as n from job_queue.workers where id = $1', [oldId])).rows[0].n, 0);

    // only the victim may run the marker: once it has, under a new id, whatever it had to write for the job is written
    await forbid(other, 'marker');
    victim.resume();
    await victim.waitForOutput('the victim to learn it was declared dead', /was declared dead by the cluster/);
    await victim.waitForOutput('its stale handler to finish', new RegExp(`finished sleep ${job.id}\\b`));
    const [marker] = (await sql.query(`select id::text from job_queue.add_job('record', flags => '{marker}')`)).rows;
    await waitForValue(sql, 'the victim to run the marker', 'select count(*)::int from runs where job_id = $1 and pid = $2', 1, [marker.id, victim.pid]);
    await waitForValue(sql, 'the marker\'s completion', 'select count(*)::int from job_queue.jobs where id = $1', 0, [marker.id]);

    const { rows: after } = await sql.query('select locked_by, attempts from job_queue.jobs where id = $1', [job.id]);
    assert.deepEqual(after, [{ locked_by: otherId, attempts: 2 }], 'the stalled worker wrote nothing for the job it lost');
    const { rows: ids } = await sql.query(`select id from job_queue.workers where id like $1`, [`%-${victim.pid}-%`]);
    assert.equal(ids.length, 1);
    assert.notEqual(ids[0].id, oldId, 'it rejoined under a new id');
    assert.equal((await sql.query('select count(*)::int as n from job_queue.jobs where locked_by = $1', [oldId])).rows[0].n, 0, 'nothing is held under the old id');
    assert.equal((await sql.query('select count(*)::int as n from job_queue.job_queues where locked_by = $1', [oldId])).rows[0].n, 0);

    // the other run completes the job: it ran twice (the stall case), but one outcome was written
    await waitForValue(sql, 'the other run to complete the job', 'select count(*)::int from job_queue.jobs where id = $1', 0, [job.id]);
    return { newVictimId: ids[0].id as string, otherId };
  }

  it('its job runs elsewhere; afterwards it writes no outcome for it and rejoins under a new id', async () => {
    // the other process is the maintenance leader, and sweeps
    const [other] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    await waitFor('the first process to lead', async () => (await leaseHolder()) === other.workerId);
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    await stallAndResume(victim, other);
    assert.equal(await leaseHolder(), other.workerId);
  });

  it('the same when the stalled worker is the maintenance leader: the other takes over the lease, and keeps it', async () => {
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    await waitFor('the victim to lead', async () => (await leaseHolder()) === victim.workerId);
    const [other] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    const { otherId } = await stallAndResume(victim, other);
    assert.equal(await leaseHolder(), otherId, 'the lease stayed with the worker that took it over');
  });

  it('its handlers\' signals abort with JQ_WORKER_LOST, and nothing those attempts write afterwards (progress, a result, an error) reaches the jobs', async () => {
    const [other] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    await waitFor('the first process to lead', async () => (await leaseHolder()) === other.workerId);
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 4, env: ENV });
    await forbid(other, 'pinned');
    const { rows: jobs } = await sql.query(
      `select id::text, outcome from unnest(array['complete', 'fail']) as outcome,
              lateral job_queue.add_job('abort-then-settle', jsonb_build_object('outcome', outcome), flags => '{pinned}') as id`,
    );
    const ids = jobs.map((job) => job.id as string).sort((a, b) => Number(a) - Number(b));
    const events = async (event: string) =>
      (await sql.query('select job_id::text, pid, code from handler_events where event = $1 and job_id = any($2::bigint[]) order by job_id', [event, ids])).rows;
    await waitFor('the victim to start both jobs', async () => (await events('started')).length === 2);
    // from now on nobody may claim them: the stale attempts are the only ones
    await forbid(victim, 'pinned');

    victim.pause();
    await waitForValue(sql, 'the sweep to take both jobs from the stalled worker', `select count(*)::int from job_queue.jobs where id = any($1::bigint[]) and locked_by is null`, 2, [ids]);
    const rowsOf = async () =>
      (
        await sql.query(
          `select id::text, locked_by, attempts, progress, last_error ~ '^JQ_WORKER_LOST' as lost from job_queue.jobs where id = any($1::bigint[]) order by id`,
          [ids],
        )
      ).rows;
    const rescued = await rowsOf();
    assert.deepEqual(rescued, ids.map((id) => ({ id, locked_by: null, attempts: 1, progress: null, lost: true })));

    victim.resume();
    await victim.waitForOutput('the victim to learn it was declared dead', /was declared dead by the cluster/);
    await waitFor('both stale handlers to settle', async () => (await events('settled')).length === 2);
    assert.deepEqual(await events('aborted'), ids.map((id) => ({ job_id: id, pid: victim.pid, code: 'JQ_WORKER_LOST' })), 'both signals aborted with JQ_WORKER_LOST');
    // a job only the victim may run, under its new id: once it is completed, the victim's
    // releases after the settles (in order, one batcher) have been written
    await forbid(other, 'marker');
    const [marker] = (await sql.query(`select id::text from job_queue.add_job('record', flags => '{marker}')`)).rows;
    await waitForValue(sql, 'the victim to run and complete the marker', 'select count(*)::int from job_queue.jobs where id = $1', 0, [marker.id]);
    assert.equal((await sql.query('select count(*)::int as n from runs where job_id = $1 and pid = $2', [marker.id, victim.pid])).rows[0].n, 1);

    assert.deepEqual(await rowsOf(), rescued, 'the stale attempts changed nothing: no progress, no attempt, no lock');
    const { rows: finished } = await sql.query('select count(*)::int as n from job_queue.finished_jobs where id = any($1::bigint[])', [ids]);
    assert.equal(finished[0].n, 0, 'neither was completed nor failed');
    assert.match(victim.output, /settled after this worker lost it; its outcome was not written/);
  });

  it('a job it had claimed ahead (prefetched), rescued during the stall, is not started as it resumes: it runs once, elsewhere', async () => {
    const [other] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    await waitFor('the first process to lead', async () => (await leaseHolder()) === other.workerId);
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 1, env: ENV });
    await forbid(other, 'pinned');
    // Fast jobs first, the victim's alone: it claims ahead only once its jobs prove fast (worker/prefetch.ts).
    const { rows: warm } = await sql.query(`select (job_queue.add_job('record', flags => '{pinned}')).id::text as id from generate_series(1, 60)`);
    await waitForValue(sql, 'the victim to run the fast jobs', 'select count(*)::int from runs where job_id = any($1::bigint[])', 60, [warm.map((row) => row.id)]);
    await waitForValue(sql, 'their completion', 'select count(*)::int from job_queue.jobs where id = any($1::bigint[])', 0, [warm.map((row) => row.id)]);
    // A job that holds its only slot for 1.5 s, shorter than the stall (its handler ignores its signal), then one it claims ahead.
    const [held] = (await sql.query(`select id::text from job_queue.add_job('sleep', '{"ms": 1500}', flags => '{pinned}')`)).rows;
    await victim.waitForOutput('the victim to start the held job', new RegExp(`started sleep ${held.id}\\b`));
    const [ahead] = (await sql.query(`select id::text from job_queue.add_job('record', flags => '{pinned}')`)).rows;
    await waitFor('the victim to claim it ahead', async () => {
      const { rows } = await sql.query('select locked_by, started_at from job_queue.jobs where id = $1', [ahead.id]);
      return rows[0]?.locked_by === victim.workerId && rows[0].started_at === null;
    });

    victim.pause();
    await allow(other, 'pinned');
    await waitForValue(sql, 'the other worker to run the job claimed ahead', 'select count(*)::int from runs where job_id = $1 and pid = $2', 1, [ahead.id, other.pid]);
    await waitFor('the other worker to run the held job', () => new RegExp(`started sleep ${held.id}\\b`).test(other.output));

    // As it resumes, the held job's handler ends at once (its 1.5 s are over) and frees the slot the job claimed ahead would take.
    victim.resume();
    await victim.waitForOutput('the victim to learn it was declared dead', /was declared dead by the cluster/);
    await victim.waitForOutput('its stale handler to finish', new RegExp(`finished sleep ${held.id}\\b`));
    // only the victim may run the marker: once it has, under its new id, it had every chance to start the job claimed ahead
    await forbid(other, 'marker');
    const [marker] = (await sql.query(`select id::text from job_queue.add_job('record', flags => '{marker}')`)).rows;
    await waitForValue(sql, 'the victim to run the marker', 'select count(*)::int from runs where job_id = $1 and pid = $2', 1, [marker.id, victim.pid]);
    const { rows: runs } = await sql.query('select pid from runs where job_id = $1', [ahead.id]);
    assert.deepEqual(runs, [{ pid: other.pid }], 'the job claimed ahead ran once, in the other worker');
  });
});
