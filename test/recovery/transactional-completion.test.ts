import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { connect, createTestDatabase } from '../support/database';
import { allow as allowFlag, CREATE_FORBIDDEN_FLAGS, forbid as forbidFlag } from '../support/forbidden-flags';
import { waitFor, waitForValue } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses, type WorkerProcess } from '../support/worker-processes';

const ENV = { HEARTBEAT_INTERVAL: '250', WORKER_TIMEOUT: '2000', FLAGS_TABLE: '1' };

/**
 * `@Task(name, { transaction: true })` under faults, in worker processes (worker-process.ts,
 * task `tx-write`): the handler's write and the job's completion are one commit, so a worker
 * killed between them, or one that lost the job to a rescue while its handler ran, leaves no
 * write behind, and the job's next run writes exactly once.
 */
describe('transactional completion under faults', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('tx_faults');
    sql = await connect(db.url);
    await sql.query('create table tx_writes (job_id bigint not null, pid int not null, attempt int not null)');
    await sql.query('create table handler_events (job_id bigint not null, pid int not null, event text not null, code text)');
    await sql.query('create table handler_go (job_id bigint not null)');
    await sql.query(CREATE_FORBIDDEN_FLAGS);
  });
  afterEach(async () => {
    await stopWorkerProcesses();
    await sql.query('truncate tx_writes, handler_events, handler_go, forbidden_flags');
    await sql.query('delete from job_queue.jobs');
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  const writes = async (jobId: string) =>
    (await sql.query('select pid, attempt from tx_writes where job_id = $1 order by attempt', [jobId])).rows as Array<{ pid: number; attempt: number }>;
  const hasEvent = async (jobId: string, pid: number, event: string) =>
    (await sql.query('select 1 from handler_events where job_id = $1 and pid = $2 and event = $3', [jobId, pid, event])).rowCount === 1;
  /** The process's database sessions that have an open transaction with writes (an xid). */
  const openWrites = async (worker: WorkerProcess) =>
    (await sql.query(`select count(*)::int as n from pg_stat_activity where application_name = $1 and backend_xid is not null`, [`worker-${worker.pid}`])).rows[0].n as number;
  const finished = async (jobId: string) =>
    (await sql.query('select state, attempts, worker_id, result, errors from job_queue.finished_jobs where id = $1', [jobId])).rows[0];

  it('a worker killed after its handler wrote, while the completion waits to commit, leaves no write; the retry writes once', async () => {
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    const [job] = (await sql.query(`select id::text from job_queue.add_job('tx-write')`)).rows;
    await waitFor('the victim to write', () => hasEvent(job.id, victim.pid, 'wrote'));

    // Hold the job's row, so that the completion (a delete of that row, in the handler's
    // transaction) waits for it: the handler has written and returned, nothing is committed.
    const locker = await connect(db.url);
    try {
      await locker.query('begin');
      await locker.query('select id from job_queue.jobs where id = $1 for update', [job.id]);
      await sql.query('insert into handler_go values ($1)', [job.id]);
      await waitFor('the victim to return', () => hasEvent(job.id, victim.pid, 'returned'));
      await waitForValue(
        sql,
        'the completion to wait for the row lock',
        `select count(*)::int from pg_stat_activity where application_name = $1 and wait_event_type = 'Lock'`,
        1,
        [`worker-${victim.pid}`],
      );
      await victim.kill();
      await locker.query('commit');
    } finally {
      await locker.end();
    }
    await waitForValue(sql, "the victim's sessions to end", 'select count(*)::int from pg_stat_activity where application_name = $1', 0, [`worker-${victim.pid}`]);
    assert.deepEqual(await writes(job.id), [], 'the write died with the transaction');
    const { rows: held } = await sql.query('select locked_by, attempts from job_queue.jobs where id = $1', [job.id]);
    assert.deepEqual(held, [{ locked_by: victim.workerId, attempts: 1 }], 'the job is still the dead worker\'s, not completed');

    // Another worker rescues it once the victim times out, and runs it again (the go-ahead is given already).
    const [rescuer] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    await waitFor('the job to complete', async () => (await finished(job.id)) !== undefined);
    const row = await finished(job.id);
    assert.deepEqual(
      { state: row.state, attempts: row.attempts, worker: row.worker_id, result: row.result, codes: row.errors.map((e: { code: string }) => e.code) },
      { state: 'completed', attempts: 2, worker: rescuer.workerId, result: { pid: rescuer.pid }, codes: ['JQ_WORKER_LOST'] },
    );
    assert.deepEqual(await writes(job.id), [{ pid: rescuer.pid, attempt: 2 }], 'written once, by the run that completed it');
  });

  it('a worker that lost its job to a rescue while its handler ran commits nothing; the other run writes once', async () => {
    const forbid = (worker: WorkerProcess, flag: string) => forbidFlag(sql, worker, flag);
    const allow = (worker: WorkerProcess, flag: string) => allowFlag(sql, worker, flag);
    const [other] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    await forbid(other, 'pinned');
    const [job] = (await sql.query(`select id::text from job_queue.add_job('tx-write', flags => '{pinned}')`)).rows;
    await waitFor('the victim to write', () => hasEvent(job.id, victim.pid, 'wrote'));
    await allow(other, 'pinned');

    // The victim stalls mid-handler (its write uncommitted); the cluster declares it dead and the other worker runs the job.
    victim.pause();
    await waitFor('the other worker to write', () => hasEvent(job.id, other.pid, 'wrote'));
    await sql.query('insert into handler_go values ($1)', [job.id]);
    await waitFor('the other run to complete the job', async () => (await finished(job.id)) !== undefined);

    // The victim resumes: its handler sees the go-ahead and returns, and its completion finds the job gone.
    victim.resume();
    await waitFor('the victim\'s handler to return', () => hasEvent(job.id, victim.pid, 'returned'));
    await waitFor('the victim\'s transaction to end', async () => (await openWrites(victim)) === 0);
    await victim.waitForOutput('the victim to learn it was declared dead', /was declared dead by the cluster/);

    assert.deepEqual(await writes(job.id), [{ pid: other.pid, attempt: 2 }], 'only the run that completed the job wrote');
    const row = await finished(job.id);
    assert.deepEqual({ state: row.state, attempts: row.attempts, worker: row.worker_id }, { state: 'completed', attempts: 2, worker: other.workerId });
    assert.doesNotMatch(victim.output, /completed it before the loss/);
  });
});
