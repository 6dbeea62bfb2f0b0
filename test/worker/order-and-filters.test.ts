import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';

const ran: string[] = [];

@Injectable()
class OrderTasks {
  @Task('record')
  async record(payload: { name: string }) {
    ran.push(payload.name);
  }
}

describe('what a worker claims, and in which order', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    db = await createTestDatabase('order');
    sql = await connect(db.url);
    t = await createTestApp({ url: db.url, providers: [OrderTasks], jobQueue: { worker: false, concurrency: 1, externalTasks: ['someone_elses_task'] } });
  });
  after(async () => {
    await sql.end();
    await t.close();
    await db.drop();
  });

  it('runs by priority, then run_at, then insertion; future jobs wait', async () => {
    ran.length = 0;
    const past = (s: number) => new Date(Date.now() - s * 1000);
    await t.jobs.add('record', { name: 'p0-old' }, { runAt: past(30) });
    await t.jobs.add('record', { name: 'p0-new' }, { runAt: past(10) });
    await t.jobs.add('record', { name: 'p5' }, { priority: 5, runAt: past(60) });
    await t.jobs.add('record', { name: 'p-1' }, { priority: -1 });
    await t.jobs.add('record', { name: 'p0-same-time-1' }, { runAt: past(5) });
    await t.jobs.add('record', { name: 'future' }, { runAt: new Date(Date.now() + 60_000) });
    await t.worker.runUntilIdle();
    assert.deepEqual(ran, ['p-1', 'p0-old', 'p0-new', 'p0-same-time-1', 'p5']);
    assert.deepEqual((await sql.query('select payload from job_queue.jobs')).rows, [{ payload: { name: 'future' } }]);
    await sql.query('delete from job_queue.jobs');
  });

  it('leaves jobs of tasks it does not know alone', async () => {
    ran.length = 0;
    const unknown = await t.jobs.add('someone_elses_task', { x: 1 });
    await t.jobs.add('record', { name: 'mine' });
    await t.worker.runUntilIdle();
    assert.deepEqual(ran, ['mine']);
    const { rows } = await sql.query('select id::text, attempts, locked_at from job_queue.jobs');
    assert.deepEqual(rows, [{ id: unknown.id, attempts: 0, locked_at: null }]);
    await sql.query('delete from job_queue.jobs');
  });

  for (const [label, forbiddenFlags] of [
    ['an array', ['slow', 'gpu']],
    ['an async function', async () => ['slow', 'gpu']],
  ] as const) {
    it(`skips jobs carrying a forbidden flag (${label})`, async () => {
      ran.length = 0;
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
        await sql.query('delete from job_queue.jobs');
      }
    });
  }
});
