import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { JobQueueMaintenance, Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor, waitForValue } from '../support/wait';

let finishKeyed: () => void = () => undefined;
const ran = new Set<string>();

@Injectable()
class LockTasks {
  /** Runs until the test lets it finish (or the shutdown aborts it). */
  @Task('keyed')
  async keyed(_payload: unknown, ctx: JobContext) {
    ran.add(ctx.job.id);
    await new Promise<void>((resolve, reject) => {
      finishKeyed = resolve;
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason));
    });
  }

  @Task('quick')
  async quick(_payload: unknown, ctx: JobContext) {
    ran.add(ctx.job.id);
  }
}

/** A row lock a caller holds on one job holds up that job's release at most, never the worker's others. */
describe('releases never wait on a caller\'s locks', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let caller: Client;
  let t: TestApp;
  let closed = false;

  before(async () => {
    db = await createTestDatabase('release_locks');
    t = await createTestApp({ url: db.url, providers: [LockTasks], jobQueue: { concurrency: 4 } });
    sql = await connect(db.url);
    caller = await connect(db.url);
  });
  after(async () => {
    await caller.query('rollback').catch(() => undefined);
    await caller.end();
    await sql.end();
    if (!closed) await t.close();
    await db.drop();
  });

  it('a caller replacing a running keyed job in an open transaction holds up only that job', async () => {
    const keyed = await t.jobs.add('keyed', {}, { jobKey: 'report' });
    await waitFor('the keyed job to start', () => ran.has(keyed.id));
    // a caller replaces the running job's key (graphile semantics: the running job loses its key) and keeps its transaction open
    await caller.query('begin');
    await caller.query(`select job_queue.add_job('keyed', '{"second": true}', job_key => 'report')`);
    finishKeyed(); // its release now waits for the caller's row lock

    const quick = await t.jobs.addMany(Array.from({ length: 20 }, () => ({ identifier: 'quick' })));
    await waitFor('the quick jobs to run', () => quick.every((job) => ran.has(job.id)));
    await waitForValue(sql, 'the quick jobs\' completions to be written while the caller still holds its lock',
      `select count(*)::int from job_queue.jobs where task_identifier = 'quick'`, 0);

    await caller.query('commit');
    await waitForValue(sql, 'the keyed job\'s completion, once the caller committed', 'select count(*)::int from job_queue.jobs where id = $1', 0, [keyed.id]);
    const rows = (await sql.query(`select key, payload from job_queue.jobs where task_identifier = 'keyed'`)).rows;
    assert.deepEqual(rows, [{ key: 'report', payload: { second: true } }], 'the replacement is queued under the key');
  });

  it('a shutdown does not wait for a caller\'s lock on a job it gives back; the sweep frees that job once the worker is gone', async () => {
    await t.close(); // its worker would claim the job too, and its maintenance lead
    closed = true;
    const app = await createTestApp({ url: db.url, providers: [LockTasks], jobQueue: { shutdownGracePeriod: 100 } });
    const job = await app.jobs.add('keyed', {}, { jobKey: 'held-at-shutdown' });
    await waitFor('the job to start', () => ran.has(job.id));
    const workerId = app.worker.workerId;
    await caller.query('begin');
    await caller.query('select 1 from job_queue.jobs where id = $1 for update', [job.id]);
    try {
      await app.close(); // the handler honours the abort; its give-back meets the caller's lock
      const { rows } = await sql.query('select locked_by from job_queue.jobs where id = $1', [job.id]);
      assert.deepEqual(rows, [{ locked_by: workerId }], 'left locked: the shutdown did not wait for the caller');
      assert.equal((await sql.query('select count(*)::int as n from job_queue.workers where id = $1', [workerId])).rows[0].n, 0);
    } finally {
      await caller.query('commit');
    }
    // a replica's sweep releases it by the orphan rule once the lock is older than its workerTimeout
    const sweeper = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: '*', heartbeatInterval: 200, workerTimeout: 1000 } });
    try {
      await waitForValue(sql, 'the lock to be older than the sweeper\'s workerTimeout',
        `select (now() - locked_at > interval '1 second')::int from job_queue.jobs where id = $1`, 1, [job.id]);
      await sweeper.app.get(JobQueueMaintenance).runOnce();
      const { rows } = await sql.query('select locked_by from job_queue.jobs where id = $1', [job.id]);
      assert.deepEqual(rows, [{ locked_by: null }]);
    } finally {
      await sweeper.close();
      await sql.query('delete from job_queue.jobs where id = $1', [job.id]);
    }
  });
});
