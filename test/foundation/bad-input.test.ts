import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { Injectable } from '@nestjs/common';
import { Task, type JobQueueErrorCode, type JobSpec } from '../../libs/job-queue/src';
import { MAX_JSON_BYTES_LIMIT } from '../../libs/job-queue/src/core/json';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';

@Injectable()
class KnownTasks {
  @Task('existing')
  existing() {}

  @Task('fine')
  fine() {}
}

describe('bad input is refused with a JQ_* code before anything is written', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let t: TestApp;
  let sql: Client;
  let snapshot: unknown[];

  const jobs = async () => (await sql.query('select * from job_queue.jobs order by id')).rows;
  const circular: Record<string, unknown> = {};
  circular.self = circular;

  before(async () => {
    db = await createTestDatabase('bad_input');
    t = await createTestApp({ url: db.url, providers: [KnownTasks], jobQueue: { worker: false, externalTasks: ['run_by_billing'] } });
    sql = await connect(db.url);
    // jobs queued before: none of the rejected calls may change them
    await t.jobs.add('existing', { keep: true }, { jobKey: 'existing-key', queueName: 'q' });
    await t.jobs.add('existing', { keep: 2 });
    snapshot = await jobs();
  });
  after(async () => {
    await sql.end();
    await t.close();
    await db.drop();
  });

  const cases: Array<[string, JobQueueErrorCode, string, unknown, JobSpec?]> = [
    ['empty task identifier', 'JQ_INVALID_TASK_IDENTIFIER', '', {}],
    ['task identifier over 128 characters', 'JQ_INVALID_TASK_IDENTIFIER', 'x'.repeat(129), {}],
    ['queue name over 128 characters', 'JQ_INVALID_QUEUE_NAME', 'existing', {}, { queueName: 'q'.repeat(129) }],
    ['job key over 512 characters', 'JQ_INVALID_JOB_KEY', 'existing', {}, { jobKey: 'k'.repeat(513) }],
    ['maxAttempts below 1', 'JQ_INVALID_MAX_ATTEMPTS', 'existing', {}, { maxAttempts: 0 }],
    ['maxAttempts above the column range', 'JQ_INVALID_MAX_ATTEMPTS', 'existing', {}, { maxAttempts: 32768 }],
    ['maxAttempts not an integer', 'JQ_INVALID_MAX_ATTEMPTS', 'existing', {}, { maxAttempts: 1.5 }],
    ['priority above the column range', 'JQ_INVALID_PRIORITY', 'existing', {}, { priority: 32768 }],
    ['priority below the column range', 'JQ_INVALID_PRIORITY', 'existing', {}, { priority: -32769 }],
    ['an invalid job key mode', 'JQ_INVALID_JOB_KEY_MODE', 'existing', {}, { jobKey: 'existing-key', jobKeyMode: 'overwrite' as never }],
    ['runAt an invalid date', 'JQ_INVALID_RUN_AT', 'existing', {}, { runAt: new Date('nope') }],
    ['runAt not a date', 'JQ_INVALID_RUN_AT', 'existing', {}, { runAt: '2026-01-01' as never }],
    ['a circular payload', 'JQ_INVALID_PAYLOAD', 'existing', circular],
    ['a BigInt payload', 'JQ_INVALID_PAYLOAD', 'existing', { n: 10n }],
    ['a function payload', 'JQ_INVALID_PAYLOAD', 'existing', () => 1],
    ['flags that are not strings', 'JQ_INVALID_FLAGS', 'existing', {}, { flags: ['ok', 3] as never }],
    ['flags that are not an array', 'JQ_INVALID_FLAGS', 'existing', {}, { flags: 'x' as never }],
    ['a task with no @Task in this app and not in externalTasks', 'JQ_UNKNOWN_TASK', 'exisitng', {}],
  ];

  for (const [name, code, identifier, payload, spec] of cases) {
    it(`add: ${name} → ${code}`, async () => {
      await assert.rejects(t.jobs.add(identifier, payload, spec), (error: { code?: string; message: string }) => {
        assert.equal(error.code, code);
        assert.match(error.message, new RegExp(`^${code}: `));
        return true;
      });
      assert.deepEqual(await jobs(), snapshot);
    });
  }

  it('addMany: one bad spec rejects the whole batch, naming its index', async () => {
    await assert.rejects(
      t.jobs.addMany([{ identifier: 'fine' }, { identifier: 'fine', payload: { n: 1n } }]),
      (error: { code?: string; message: string }) => error.code === 'JQ_INVALID_PAYLOAD' && /job 1/.test(error.message),
    );
    await assert.rejects(t.jobs.addMany([{ identifier: 'x'.repeat(200) }]), { code: 'JQ_INVALID_TASK_IDENTIFIER' });
    await assert.rejects(
      t.jobs.addMany([{ identifier: 'fine' }, { identifier: 'run_by_billing' }, { identifier: 'fien' }]),
      (error: { code?: string; message: string }) => {
        assert.equal(error.code, 'JQ_UNKNOWN_TASK');
        assert.equal(error.message, `JQ_UNKNOWN_TASK: addMany, job 2: no @Task('fien') in this app: check the name, or list it in the externalTasks option if another app runs it`);
        return true;
      },
    );
    assert.deepEqual(await jobs(), snapshot);
  });

  it('a task listed in externalTasks, or any with externalTasks: \'*\', is accepted without a handler here', async () => {
    const job = await t.jobs.add('run_by_billing', { invoice: 7 });
    assert.deepEqual((await sql.query('select task_identifier, attempts from job_queue.jobs where id = $1', [job.id])).rows, [
      { task_identifier: 'run_by_billing', attempts: 0 },
    ]);
    await sql.query('delete from job_queue.jobs where id = $1', [job.id]);
    const anyTask = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: '*' } });
    try {
      const other = await anyTask.jobs.add('whatever_another_app_runs');
      await sql.query('delete from job_queue.jobs where id = $1', [other.id]);
    } finally {
      await anyTask.close();
    }
    assert.deepEqual(await jobs(), snapshot);
  });

  it('admin calls refuse ids that are not bigints', async () => {
    await assert.rejects(t.jobs.completeJobs(['1; drop table x']), { code: 'JQ_INVALID_JOB_ID' });
    await assert.rejects(t.jobs.getJob('abc'), { code: 'JQ_INVALID_JOB_ID' });
    await assert.rejects(t.jobs.rescheduleJobs(['1'], { priority: 40000 }), { code: 'JQ_INVALID_PRIORITY' });
    assert.deepEqual(await jobs(), snapshot);
  });

  it('a schema name that is not a plain identifier stops the app at startup', async () => {
    for (const schema of ['job-queue', 'a"; drop schema public; --', '1abc', 'x'.repeat(51), '']) {
      await assert.rejects(createTestApp({ url: db.url, jobQueue: { schema, worker: false } }), { code: 'JQ_INVALID_SCHEMA' });
    }
    const schemas = (await sql.query(`select nspname from pg_namespace where nspname not like 'pg_%' and nspname <> 'information_schema' order by 1`)).rows;
    assert.deepEqual(schemas.map((r) => r.nspname), ['job_queue', 'public']);
  });

  it('bad module options stop the app at startup', async () => {
    await assert.rejects(createTestApp({ url: db.url, jobQueue: { concurrency: 0 } }), { code: 'JQ_INVALID_OPTIONS' });
    await assert.rejects(createTestApp({ url: db.url, jobQueue: { pollInterval: -5 } }), { code: 'JQ_INVALID_OPTIONS' });
    await assert.rejects(createTestApp({ url: db.url, jobQueue: { forbiddenFlags: [1] as never } }), { code: 'JQ_INVALID_OPTIONS' });
    await assert.rejects(createTestApp({ url: db.url, jobQueue: { externalTasks: 'billing' as never } }), { code: 'JQ_INVALID_OPTIONS' });
    await assert.rejects(createTestApp({ url: db.url, jobQueue: { externalTasks: ['ok', ''] } }), (error: { code?: string; message: string }) => {
      assert.equal(error.code, 'JQ_INVALID_OPTIONS');
      assert.match(error.message, /^JQ_INVALID_OPTIONS: externalTasks: task identifier must be/);
      return true;
    });
    // A result over 32 MiB might not fit the one jsonb a release writes, and would hold up every later release.
    for (const maxJsonBytes of [MAX_JSON_BYTES_LIMIT + 1, 256 * 1_048_576]) {
      await assert.rejects(createTestApp({ url: db.url, jobQueue: { worker: false, maxJsonBytes } }), (error: { code?: string; message: string }) => {
        assert.equal(error.code, 'JQ_INVALID_OPTIONS');
        assert.equal(
          error.message,
          `JQ_INVALID_OPTIONS: maxJsonBytes must be an integer from 1 to 33554432 (32 MiB: the most JSON one release can write), got ${maxJsonBytes}`,
        );
        return true;
      });
    }
    assert.deepEqual(await jobs(), snapshot);
  });
});
