import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Client } from 'pg';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { recordingTask } from '../support/tasks';

const { provider: QueueTasks, ran } = recordingTask('record');

/** A named queue whose head this worker may not run waits behind it; nothing else does. */
describe('a named queue blocked at its head', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  const behindHead = 50;

  before(async () => {
    // a small concurrency, so that one claim asks for fewer jobs than wait behind the head
    ({ db, sql, t } = await openTestApp('blocked_queues', {
      providers: [QueueTasks],
      jobQueue: { worker: false, concurrency: 2, forbiddenFlags: ['paused'], externalTasks: ['run_elsewhere'] },
    }));
  });
  after(() => closeTestApp({ db, sql, t }));
  beforeEach(async () => {
    await sql.query('delete from job_queue.jobs');
    ran.length = 0;
  });

  /** The head, `behindHead` more jobs in its queue, then one job in no queue. */
  const queueBehind = async (head: { identifier: string; flags?: string[] }) => {
    await t.jobs.add(head.identifier, { name: 'head' }, { queueName: 'serial', flags: head.flags });
    await t.jobs.addMany(Array.from({ length: behindHead }, (_, n) => ({ identifier: 'record', payload: { name: `q${n}` }, queueName: 'serial' })));
    await t.jobs.add('record', { name: 'free' });
  };
  const left = async () => (await sql.query(`select count(*)::int as n from job_queue.jobs where queue_name = 'serial'`)).rows[0].n;

  it('a head with a forbidden flag: its queue waits, the job outside it runs; lifting the flag runs the queue in order', async () => {
    await queueBehind({ identifier: 'record', flags: ['paused'] });
    await t.worker.runUntilIdle();
    assert.deepEqual(ran, ['free']);
    assert.equal(await left(), behindHead + 1, 'the whole queue still waits');

    await sql.query(`update job_queue.jobs set flags = '{}' where payload->>'name' = 'head'`);
    await t.worker.runUntilIdle();
    assert.deepEqual(ran, ['free', 'head', ...Array.from({ length: behindHead }, (_, n) => `q${n}`)]);
  });

  it('a head another app runs: its queue waits for that app, the job outside it runs', async () => {
    await queueBehind({ identifier: 'run_elsewhere' });
    await t.worker.runUntilIdle();
    assert.deepEqual(ran, ['free']);
    assert.equal(await left(), behindHead + 1);
  });
});
