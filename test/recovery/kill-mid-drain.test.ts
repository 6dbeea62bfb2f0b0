import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { connect, createTestDatabase } from '../support/database';
import { waitFor, waitForNoJobs } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses, type WorkerProcess } from '../support/worker-processes';

/** The backends of one worker process (its pool's and its pinned connection) that are running a statement. */
async function activeBackends(sql: Client, pid: number): Promise<number> {
  const { rows } = await sql.query(
    `select count(*)::int as n from pg_stat_activity
      where datname = current_database() and application_name in ($1, $2) and state <> 'idle'`,
    [`worker-${pid}`, `nestjs-job-queue worker ${pid}`],
  );
  return rows[0].n;
}

/**
 * Freezes a worker process and waits until none of its statements is still running in the
 * server, so that what it holds can be read before it is killed. Returns its locked jobs.
 */
async function freeze(sql: Client, worker: WorkerProcess): Promise<Array<{ id: string; attempts: number; started: boolean }>> {
  worker.pause();
  await waitFor('the frozen worker\'s statements to finish in the server', async () => (await activeBackends(sql, worker.pid)) === 0);
  const { rows } = await sql.query(
    `select id::text, attempts, started_at is not null as started from job_queue.jobs where locked_by = $1 order by id`,
    [worker.workerId],
  );
  return rows;
}

describe('a worker process killed with SIGKILL', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('kill_drain');
    sql = await connect(db.url);
    await sql.query('create table runs (job_id bigint not null, pid int not null, attempt int not null)');
  });
  afterEach(async () => {
    await stopWorkerProcesses();
    await sql.query('truncate runs');
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  it('mid-drain of 3,000 jobs: every job completes; its started jobs count an attempt, its prefetched ones do not', async (t) => {
    const env = { HEARTBEAT_INTERVAL: '250', WORKER_TIMEOUT: '2000' };
    const [victim, ...others] = await startWorkerProcesses(3, { url: db.url, concurrency: 4, env });
    // 2,950 quick jobs and 50 that take 1.5 s, interleaved
    await sql.query(`
      select case when n % 59 = 0 then job_queue.add_job('nap', '{"ms": 1500}') else job_queue.add_job('record') end
      from generate_series(1, 3000) as n`);
    const total = 3000;
    // Frozen while it holds both: between a look and the SIGSTOP a running worker may start
    // its last prefetched jobs, so a freeze that finds none is undone and tried again.
    let held: Array<{ id: string; attempts: number; started: boolean }> = [];
    await waitFor('the victim frozen while busy with started and prefetched jobs', async () => {
      const { rows } = await sql.query(
        `select count(*) filter (where started_at is not null)::int as started, count(*) filter (where started_at is null)::int as prefetched,
                (select count(*)::int from runs) as ran
           from job_queue.jobs where locked_by = $1`,
        [victim.workerId],
      );
      if (!(rows[0].started > 0 && rows[0].prefetched > 0 && rows[0].ran > 300)) return false;
      held = await freeze(sql, victim);
      if (held.some((job) => job.started) && held.some((job) => !job.started)) return true;
      victim.resume();
      return false;
    });
    const started = held.filter((job) => job.started);
    const prefetched = held.filter((job) => !job.started);
    assert.ok(started.length > 0 && prefetched.length > 0, `the victim held started and prefetched jobs: ${JSON.stringify(held)}`);

    const killedAt = Date.now();
    await victim.kill();
    await waitFor('the killed worker\'s jobs to be released', async () => {
      const { rows } = await sql.query('select count(*)::int as n from job_queue.jobs where locked_by = $1', [victim.workerId]);
      return rows[0].n === 0;
    });
    const recoveryMs = Date.now() - killedAt;
    t.diagnostic(`recovery after kill -9 (heartbeatInterval 250 ms, workerTimeout 2000 ms): ${recoveryMs} ms`);
    await waitForNoJobs(sql);

    // every job completed (none is left, failed or otherwise), and each ran once, but for
    // jobs the victim held when it died: it may have run them (a release not yet written, or
    // a start not yet marked), and then they ran once in it and once elsewhere
    const { rows: counts } = await sql.query(
      `select job_id::text, count(*)::int as n, count(*) filter (where pid = $1)::int as in_victim from runs group by job_id`,
      [victim.pid],
    );
    assert.equal(counts.length, total, 'every job ran');
    const heldIds = new Set(held.map((job) => job.id));
    const twice = counts.filter((row) => row.n > 1 && !(row.n === 2 && row.in_victim === 1 && heldIds.has(row.job_id)));
    assert.deepEqual(twice, [], 'no job ran twice, but for jobs the killed worker held, once in it and once elsewhere');

    // the attempt each held job ran with afterwards, in the surviving processes
    const survivors = others.map((worker) => worker.pid);
    const { rows: reruns } = await sql.query(
      `select job_id::text, attempt from runs where job_id = any($1::bigint[]) and pid = any($2::int[]) order by job_id`,
      [held.map((job) => job.id), survivors],
    );
    const rerunAttempt = new Map(reruns.map((row) => [row.job_id, row.attempt]));
    for (const job of started) assert.equal(rerunAttempt.get(job.id), job.attempts + 1, `started job ${job.id}: the lost attempt counted`);
    for (const job of prefetched) assert.equal(rerunAttempt.get(job.id), job.attempts, `prefetched job ${job.id}: no attempt charged`);
    assert.equal((await sql.query('select count(*)::int as n from job_queue.workers where id = $1', [victim.workerId])).rows[0].n, 0);
  });

  it('at the default settings, a killed worker\'s running job runs again, no sooner than workerTimeout after its last heartbeat', async (t) => {
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 2 });
    const [job] = (await sql.query(`select id::text from job_queue.add_job('nap', '{"ms": 60000}')`)).rows;
    await waitFor('the victim to start the job', async () => {
      const { rows } = await sql.query('select started_at is not null as started from job_queue.jobs where id = $1 and locked_by = $2', [job.id, victim.workerId]);
      return rows[0]?.started === true;
    });
    const [survivor] = await startWorkerProcesses(1, { url: db.url, concurrency: 2 });
    const { rows: beat } = await sql.query('select heartbeat_at from job_queue.workers where id = $1', [victim.workerId]);
    await victim.kill();
    const killedAt = Date.now();
    await waitFor('the job to be rescued', async () => {
      const { rows } = await sql.query('select locked_by, last_error from job_queue.jobs where id = $1', [job.id]);
      return rows[0].locked_by !== victim.workerId;
    });
    const recoveryMs = Date.now() - killedAt;
    t.diagnostic(`recovery after kill -9 at the defaults (heartbeatInterval 5 s, workerTimeout 20 s): ${recoveryMs} ms`);
    // the sweep sets updated_at to its own start, on the database's clock
    const { rows } = await sql.query(
      `select attempts, last_error, updated_at - $2::timestamptz >= interval '20 seconds' as timed_out from job_queue.jobs where id = $1`,
      [job.id, beat[0].heartbeat_at],
    );
    assert.equal(rows[0].attempts, 1, 'the lost attempt counts');
    assert.match(rows[0].last_error, /^JQ_WORKER_LOST: worker \S+ stopped heartbeating/);
    assert.equal(rows[0].timed_out, true, 'not rescued before workerTimeout had passed since its last heartbeat');
    // and it runs again, in the survivor, with its next attempt (shortened, and due now rather than after its backoff)
    const shortened = await sql.query(`update job_queue.jobs set payload = '{"ms": 10}', run_at = now() where id = $1 and locked_by is null`, [job.id]);
    assert.equal(shortened.rowCount, 1);
    await waitForNoJobs(sql);
    assert.deepEqual((await sql.query('select pid, attempt from runs where job_id = $1', [job.id])).rows, [{ pid: survivor.pid, attempt: 2 }]);
  });

  it('a job its process started at its add (localStart) and was running when SIGKILLed runs again in another worker, the lost attempt counted', async () => {
    const env = { HEARTBEAT_INTERVAL: '250', WORKER_TIMEOUT: '2000' };
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: { ...env, ADD_AT_START: JSON.stringify({ identifier: 'nap', payload: { ms: 60_000 } }) } });
    await waitFor('the victim to add its job', () => /^added \S+ \S+$/m.test(victim.output));
    const [, id, state] = /^added (\S+) (\S+)$/m.exec(victim.output)!;
    assert.equal(state, 'running', 'started at its add');
    const { rows: held } = await sql.query('select locked_by, attempts, started_at is not null as started from job_queue.jobs where id = $1', [id]);
    assert.deepEqual(held, [{ locked_by: victim.workerId, attempts: 1, started: true }]);
    const [survivor] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env });
    await victim.kill();
    await waitFor('the job to be rescued', async () => {
      const { rows } = await sql.query('select locked_by from job_queue.jobs where id = $1', [id]);
      return rows[0].locked_by !== victim.workerId;
    });
    const { rows: rescued } = await sql.query('select attempts, last_error from job_queue.jobs where id = $1', [id]);
    assert.equal(rescued[0].attempts, 1, 'the lost attempt counts');
    assert.match(rescued[0].last_error, /^JQ_WORKER_LOST/);
    // due now and short, so that the survivor runs it at once
    await sql.query(`update job_queue.jobs set payload = '{"ms": 10}', run_at = now() where id = $1 and locked_by is null`, [id]);
    await waitForNoJobs(sql);
    assert.deepEqual((await sql.query('select pid, attempt from runs where job_id = $1', [id])).rows, [{ pid: survivor.pid, attempt: 2 }]);
  });
});
