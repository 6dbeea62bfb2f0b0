import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { JobWaiter } from '../../libs/job-queue/src/service/job-waiter';
import { createTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

/** Jobs whose handler has started, by id. */
const started = new Set<string>();

@Injectable()
class Tasks {
  /** Runs until its signal aborts, then fails with the abort's reason. */
  @Task('hold')
  async hold(_payload: unknown, ctx: JobContext) {
    started.add(ctx.job.id);
    await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
  }
}

/**
 * Jobs a worker lets go of without finishing them: a cancelled job given back at shutdown is
 * finished cancelled in the give-back itself (its key free at once, no maintenance round
 * needed), and a job removed by its key tells the waiters of waitForJob.
 */
describe('letting go of a job', () => {
  let db: TestDatabase;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('lifecycle_letting_go');
    sql = await connect(db.url);
  });
  after(async () => {
    await sql?.end();
    await db?.drop();
  });

  it('a job whose cancel the worker never heard is finished cancelled by the shutdown give-back, and its key is free at once', async () => {
    const t = await createTestApp({ url: db.url, providers: [Tasks], jobQueue: { shutdownGracePeriod: 100, heartbeatInterval: '1m', workerTimeout: '2m' } });
    let closed = false;
    try {
      const job = await t.jobs.add('hold', {}, { jobKey: 'report-7' });
      await waitFor('the handler to start', () => started.has(job.id));
      // The cancel recorded without its NOTIFY, and no heartbeat before the shutdown: the worker never hears of it.
      await sql.query(`update job_queue.jobs set cancel_requested_at = now(), cancel_reason = 'quietly' where id = $1`, [job.id]);
      await t.close();
      closed = true;
      const { rows } = await sql.query(`select state, last_error, attempts from job_queue.finished_jobs where id = $1`, [job.id]);
      assert.deepEqual(rows, [{ state: 'cancelled', last_error: 'JQ_JOB_CANCELLED: quietly', attempts: 1 }]);
      assert.equal((await sql.query(`select 1 from job_queue.jobs where id = $1`, [job.id])).rowCount, 0);
      // No maintenance round ran (heartbeats every minute): the give-back freed the key itself.
      const { rows: added } = await sql.query(`select id::text from job_queue.add_job('hold', '{}', job_key => 'report-7', job_key_mode => 'unsafe_dedupe')`);
      assert.notEqual(added[0].id, job.id, 'the key of the cancelled job makes a new job');
    } finally {
      if (!closed) await t.close();
    }
  });

  it('removeJob tells the waiters of the removed job: they reject with JQ_JOB_NOT_FOUND at once, without a timeout', async () => {
    const t: TestApp = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: ['later'] } });
    try {
      const job = await t.jobs.add('later', {}, { jobKey: 'later-1', runAt: new Date(Date.now() + 3_600_000) });
      const waiting = t.jobs.waitForJob(job.id).then(
        () => 'resolved',
        (error: { code?: string }) => error.code,
      );
      // The wait listens and is registered (its first read finds the job scheduled): the removal must wake it, with no timeout set.
      await waitFor('the wait to register', () => t.app.get(JobWaiter).waitedJobs === 1);
      const removed = await t.jobs.removeJob('later-1');
      assert.equal(removed?.id, job.id);
      assert.equal(await waiting, 'JQ_JOB_NOT_FOUND');
    } finally {
      await t.close();
    }
  });
});
