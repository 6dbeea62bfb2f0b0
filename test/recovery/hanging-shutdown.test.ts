import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { connect, createTestDatabase } from '../support/database';
import { waitFor, waitForValue } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses } from '../support/worker-processes';

const ENV = { HEARTBEAT_INTERVAL: '250', WORKER_TIMEOUT: '2000', SHUTDOWN_GRACE: '300' };

describe('a handler that ignores the abort at shutdown', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('hanging_shutdown');
    sql = await connect(db.url);
  });
  afterEach(() => stopWorkerProcesses());
  after(async () => {
    await sql.end();
    await db.drop();
  });

  it('keeps its job locked while its process lives; once the process is gone, the job runs elsewhere, never twice at once', async () => {
    const [victim] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    const victimId = victim.workerId!;
    const [job] = (await sql.query(`select id::text from job_queue.add_job('sleep', '{"ms": 600000}')`)).rows;
    await victim.waitForOutput('the job to start', new RegExp(`started sleep ${job.id}\\b`));

    victim.signal('SIGTERM');
    await victim.waitForOutput('the shutdown to keep the stuck job', /handler\(s\) ignored the abort at shutdown/);
    const [survivor] = await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV });
    const { rows: signalled } = await sql.query('select now() as at');
    // the survivor leads now (the victim gave up the lease at shutdown) and sweeps each
    // heartbeatInterval: once its lease was renewed long after the victim would have timed
    // out, had it stopped heartbeating, its sweeps have looked at the victim and let it be
    await waitFor('the survivor to have swept past the victim\'s timeout', async () => {
      const { rows } = await sql.query(
        `select holder = $1 and expires_at > $2::timestamptz + interval '4 seconds' as past from job_queue.leases where name = 'maintenance'`,
        [survivor.workerId, signalled[0].at],
      );
      return rows[0]?.past === true;
    });
    const { rows: held } = await sql.query('select locked_by, attempts from job_queue.jobs where id = $1', [job.id]);
    assert.deepEqual(held, [{ locked_by: victimId, attempts: 1 }], 'still locked by the shutting-down process, which heartbeats on');
    assert.equal(victim.child.exitCode, null, 'the process is alive');
    assert.doesNotMatch(survivor.output, new RegExp(`started sleep ${job.id}\\b`));

    await victim.kill();
    const killedOutputLength = survivor.output.length;
    await waitFor('the job to be rescued', async () => {
      const { rows } = await sql.query('select locked_by from job_queue.jobs where id = $1', [job.id]);
      return rows[0].locked_by !== victimId;
    });
    const { rows: rescued } = await sql.query('select attempts, last_error from job_queue.jobs where id = $1', [job.id]);
    assert.equal(rescued[0].attempts, 1, 'the attempt it hung in counts');
    assert.match(rescued[0].last_error, /^JQ_WORKER_LOST/);
    // shorten it, so that the survivor's run ends the test
    const shortened = await sql.query(`update job_queue.jobs set payload = '{"ms": 10}', run_at = now() where id = $1 and locked_by is null`, [job.id]);
    assert.equal(shortened.rowCount, 1);
    await waitForValue(sql, 'the survivor to run the job', 'select count(*)::int from job_queue.jobs where id = $1', 0, [job.id]);
    assert.match(survivor.output.slice(killedOutputLength), new RegExp(`started sleep ${job.id}\\b`), 'it started in the survivor only after the victim was killed');
    assert.doesNotMatch(survivor.output.slice(0, killedOutputLength), new RegExp(`started sleep ${job.id}\\b`));
  });
});
