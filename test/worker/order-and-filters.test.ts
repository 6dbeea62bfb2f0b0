import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task } from '../../libs/job-queue/src';
import { closeTestApp, createTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';

const ran: string[] = [];

@Injectable()
class OrderTasks {
  @Task('record')
  async record(payload: { name: string }) {
    ran.push(payload.name);
  }
}

describe('what a worker claims, and in which order', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    ({ db, sql, t } = await openTestApp('order', { providers: [OrderTasks], jobQueue: { worker: false, concurrency: 1, externalTasks: ['someone_elses_task'] } }));
  });
  after(() => closeTestApp({ db, sql, t }));
  // Here rather than at the end of each test, so that a failed assertion leaves nothing behind for the next one.
  beforeEach(async () => {
    await sql.query('delete from job_queue.jobs');
    await sql.query('update job_queue.job_queues set locked_at = null, locked_by = null');
    ran.length = 0;
  });

  it('runs by priority, then run_at, then insertion; future jobs wait', async () => {
    const past = (s: number) => new Date(Date.now() - s * 1000);
    const sameTime = past(20);
    // Inserted so that no two of the orders (priority, id), (priority, run_at, id) and
    // (priority, run_at, id desc) agree: the later of two due p0 jobs goes in first, and two
    // jobs share a run_at. All are due; only 'future' is not.
    await t.jobs.add('record', { name: 'p0-due-10s-ago' }, { runAt: past(10) });
    await t.jobs.add('record', { name: 'p5' }, { priority: 5, runAt: past(60) });
    await t.jobs.add('record', { name: 'p0-due-30s-ago' }, { runAt: past(30) });
    await t.jobs.add('record', { name: 'p0-same-time-first' }, { runAt: sameTime });
    await t.jobs.add('record', { name: 'p0-same-time-second' }, { runAt: sameTime });
    await t.jobs.add('record', { name: 'p-1' }, { priority: -1 });
    await t.jobs.add('record', { name: 'future' }, { runAt: new Date(Date.now() + 60_000) });
    await t.worker.runUntilIdle();
    assert.deepEqual(ran, ['p-1', 'p0-due-30s-ago', 'p0-same-time-first', 'p0-same-time-second', 'p0-due-10s-ago', 'p5']);
    assert.deepEqual((await sql.query('select payload from job_queue.jobs')).rows, [{ payload: { name: 'future' } }]);
  });

  it('leaves jobs of tasks it does not know alone', async () => {
    const unknown = await t.jobs.add('someone_elses_task', { x: 1 });
    await t.jobs.add('record', { name: 'mine' });
    await t.worker.runUntilIdle();
    assert.deepEqual(ran, ['mine']);
    const { rows } = await sql.query('select id::text, attempts, locked_at from job_queue.jobs');
    assert.deepEqual(rows, [{ id: unknown.id, attempts: 0, locked_at: null }]);
  });

  for (const [label, forbiddenFlags] of [
    ['an array', ['slow', 'gpu']],
    ['an async function', async () => ['slow', 'gpu']],
  ] as const) {
    it(`skips jobs carrying a forbidden flag (${label})`, async () => {
      const flagged = await createTestApp({
        url: db.url,
        providers: [OrderTasks],
        jobQueue: { worker: false, forbiddenFlags: forbiddenFlags as string[] | (() => Promise<string[]>) },
      });
      try {
        await flagged.jobs.add('record', { name: 'slow' }, { flags: ['slow'] });
        await flagged.jobs.add('record', { name: 'other-flag' }, { flags: ['fast'] });
        await flagged.jobs.add('record', { name: 'gpu+fast' }, { flags: ['fast', 'gpu'] });
        await flagged.jobs.add('record', { name: 'none' });
        await flagged.worker.runUntilIdle();
        assert.deepEqual(ran.sort(), ['none', 'other-flag']);
        const left = (await sql.query(`select payload->>'name' as name, attempts from job_queue.jobs order by id`)).rows;
        assert.deepEqual(left, [{ name: 'slow', attempts: 0 }, { name: 'gpu+fast', attempts: 0 }]);
      } finally {
        await flagged.close();
      }
    });
  }
});
