import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
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
    await t.close();
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
});
