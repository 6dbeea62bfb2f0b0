import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { connect, createTestDatabase } from '../support/database';
import { CREATE_FORBIDDEN_FLAGS, forbid } from '../support/forbidden-flags';
import { waitFor } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses, type WorkerProcess } from '../support/worker-processes';

const HEARTBEAT_MS = 250;
const TIMEOUT_MS = 2000;
const ENV = { HEARTBEAT_INTERVAL: String(HEARTBEAT_MS), WORKER_TIMEOUT: String(TIMEOUT_MS), FLAGS_TABLE: '1' };
/**
 * The promise (docs/guarantees.md, "A crash"): a killed worker's jobs run again after
 * `workerTimeout` plus at most one `heartbeatInterval`. The bound checked here adds the
 * maintenance rounds' jitter (10 %) and a second of slack for a loaded machine: 3.3 s.
 */
const BOUND_MS = TIMEOUT_MS + HEARTBEAT_MS * 1.1 + 1000;

/**
 * How soon a SIGKILLed worker's running job is rescued, on the database's clock: from the
 * victim's last heartbeat (read after the kill, so nothing newer can come) to the sweep that
 * freed the job (it sets the job's `updated_at` to its own start), and on the test's clock
 * from the kill to the moment the test saw the job free.
 */
describe('the recovery time after kill -9', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('recovery_time');
    sql = await connect(db.url);
    await sql.query('create table runs (job_id bigint not null, pid int not null, attempt int not null)');
    await sql.query(CREATE_FORBIDDEN_FLAGS);
  });
  afterEach(async () => {
    await stopWorkerProcesses();
    await sql.query('truncate runs, forbidden_flags');
    await sql.query('delete from job_queue.jobs');
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  const leaseHolder = async () => (await sql.query(`select holder from job_queue.leases where name = 'maintenance' and expires_at > now()`)).rows[0]?.holder;

  /** Adds a long job only `victim` may run, waits for it to start there, and returns its id. */
  async function runLongJobIn(victim: WorkerProcess, others: WorkerProcess[]): Promise<string> {
    for (const other of others) await forbid(sql, other, 'pinned');
    const [job] = (await sql.query(`select id::text from job_queue.add_job('nap', '{"ms": 600000}', flags => '{pinned}')`)).rows;
    await waitFor('the victim to start the job', async () => {
      const { rows } = await sql.query('select started_at is not null as started from job_queue.jobs where id = $1 and locked_by = $2', [job.id, victim.workerId]);
      return rows[0]?.started === true;
    });
    return job.id;
  }

  async function killAndTime(victim: WorkerProcess, jobId: string): Promise<{ sinceHeartbeatMs: number; sinceKillMs: number }> {
    const killedAt = Date.now();
    await victim.kill();
    const { rows: beat } = await sql.query('select heartbeat_at from job_queue.workers where id = $1', [victim.workerId]);
    assert.equal(beat.length, 1, 'the victim\'s row is still there right after the kill');
    await waitFor('the job to be rescued', async () => {
      const { rows } = await sql.query('select locked_by from job_queue.jobs where id = $1', [jobId]);
      return rows[0].locked_by === null;
    });
    const sinceKillMs = Date.now() - killedAt;
    const { rows } = await sql.query(
      `select attempts, last_error, extract(epoch from updated_at - $2::timestamptz) * 1000 as ms from job_queue.jobs where id = $1`,
      [jobId, beat[0].heartbeat_at],
    );
    assert.equal(rows[0].attempts, 1, 'the lost attempt counts');
    assert.match(rows[0].last_error, /^JQ_WORKER_LOST: worker \S+ stopped heartbeating/);
    return { sinceHeartbeatMs: Number(rows[0].ms), sinceKillMs };
  }

  function assertWithinBound(t: { diagnostic(message: string): void }, who: string, time: { sinceHeartbeatMs: number; sinceKillMs: number }) {
    t.diagnostic(`${who} killed: rescued ${Math.round(time.sinceHeartbeatMs)} ms after its last heartbeat, seen ${time.sinceKillMs} ms after the kill`);
    assert.ok(time.sinceHeartbeatMs >= TIMEOUT_MS, `not rescued before workerTimeout: ${time.sinceHeartbeatMs} ms`);
    assert.ok(time.sinceHeartbeatMs <= BOUND_MS, `rescued within workerTimeout + heartbeatInterval (+ slack ${BOUND_MS} ms): ${time.sinceHeartbeatMs} ms`);
    assert.ok(time.sinceKillMs <= BOUND_MS + 500, `seen within the bound after the kill: ${time.sinceKillMs} ms`);
  }

  it('a worker that is not the maintenance leader: the leader\'s next sweep past its timeout frees its job', async (t) => {
    const [leader] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    await waitFor('the first process to lead', async () => (await leaseHolder()) === leader.workerId);
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    const jobId = await runLongJobIn(victim, [leader]);
    assertWithinBound(t, 'a worker', await killAndTime(victim, jobId));
    assert.equal(await leaseHolder(), leader.workerId);
  });

  it('the maintenance leader: another worker takes the lease once it expires, and frees the job in the same round', async (t) => {
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    await waitFor('the victim to lead', async () => (await leaseHolder()) === victim.workerId);
    const [other] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    const jobId = await runLongJobIn(victim, [other]);
    assertWithinBound(t, 'the leader', await killAndTime(victim, jobId));
    assert.equal(await leaseHolder(), other.workerId, 'the other worker leads now');
  });
});
