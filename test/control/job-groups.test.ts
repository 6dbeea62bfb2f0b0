import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

/** Records the group its handler sees. */
@Injectable()
class Tenants {
  static readonly seen: Array<string | null> = [];

  @Task('tenant_sync', { groupConcurrency: 1 })
  async sync(_payload: unknown, ctx: JobContext) {
    Tenants.seen.push(ctx.job.group);
  }
}

/**
 * The job spec `group` (issue 27.2): every way of adding a job keeps it (add, addMany, keyed or
 * not, in a transaction), a keyed replace moves the job to the new group and `unsafe_dedupe`
 * leaves it, the handler and getJob see it, history keeps it and a retry brings it back; the SQL
 * add_job() takes a replaced job out of its group; bad groups are refused with JQ_INVALID_GROUP
 * before anything is written, and flows take none yet.
 */
describe('the job spec group', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp;
  const groupOf = async (id: string) => (await sql.query<{ group_key: string | null }>('select group_key from job_queue.jobs where id = $1', [id])).rows[0]?.group_key;

  before(async () => {
    db = await createTestDatabase('job_groups');
    sql = await connect(db.url);
    t = await createTestApp({ url: db.url, providers: [Tenants], jobQueue: { worker: false, externalTasks: ['elsewhere'] } });
  });
  after(async () => {
    await t?.close();
    await sql?.end();
    await db?.drop();
  });

  it('add, addMany, keyed and not, inside a transaction: the row, the returned job and getJob carry the group', async () => {
    const plain = await t.jobs.add('tenant_sync' as never, {} as never, { group: 'acme' });
    const keyed = await t.jobs.add('tenant_sync' as never, {} as never, { group: 'acme', jobKey: 'sync:acme' });
    const [many, none, manyKeyed] = await t.jobs.addMany([
      { identifier: 'tenant_sync', group: 'globex' },
      { identifier: 'tenant_sync' },
      { identifier: 'tenant_sync', group: 'initech', jobKey: 'sync:initech' },
    ] as never);
    const inTransaction = await t.dataSource.transaction((manager) => t.jobs.add('tenant_sync' as never, {} as never, { group: 'umbrella', manager }));
    const expected: Array<[{ id: string; group: string | null }, string | null]> = [[plain, 'acme'], [keyed, 'acme'], [many, 'globex'], [none, null], [manyKeyed, 'initech'], [inTransaction, 'umbrella']];
    for (const [job, group] of expected) {
      assert.equal(job.group, group, `the returned job ${job.id}`);
      assert.equal(await groupOf(job.id), group, `the row of ${job.id}`);
      assert.equal((await t.jobs.getJob(job.id))?.group, group, `getJob(${job.id})`);
    }
  });

  it('a keyed replace moves the waiting job to the new group; unsafe_dedupe leaves it in its own', async () => {
    const first = await t.jobs.add('tenant_sync' as never, {} as never, { group: 'one', jobKey: 'move' });
    const replaced = await t.jobs.add('tenant_sync' as never, {} as never, { group: 'two', jobKey: 'move' });
    assert.equal(replaced.id, first.id);
    assert.equal(await groupOf(first.id), 'two');
    const kept = await t.jobs.add('tenant_sync' as never, {} as never, { group: 'three', jobKey: 'move', jobKeyMode: 'unsafe_dedupe' });
    assert.equal(kept.id, first.id);
    assert.equal(await groupOf(first.id), 'two', 'unsafe_dedupe changes nothing');
    await t.jobs.add('tenant_sync' as never, {} as never, { jobKey: 'move' });
    assert.equal(await groupOf(first.id), null, 'replaced without a group: in none');
  });

  it('a job failed for good keeps its group in history, and a retry brings it back into it', async () => {
    const job = await t.jobs.add('tenant_sync' as never, {} as never, { group: 'acme' });
    await t.jobs.permanentlyFailJobs([job.id], 'gave up');
    assert.equal((await sql.query('select group_key from job_queue.finished_jobs where id = $1', [job.id])).rows[0]?.group_key, 'acme');
    assert.equal((await t.jobs.getJob(job.id))?.group, 'acme', 'getJob of the finished job');
    await t.jobs.retryJobs([job.id]);
    assert.equal(await groupOf(job.id), 'acme', 'back in jobs, in its group');
  });

  it("the SQL add_job() (no group parameter) takes a replaced job out of its group", async () => {
    const job = await t.jobs.add('tenant_sync' as never, {} as never, { group: 'acme', jobKey: 'by-sql' });
    await sql.query(`select job_queue.add_job('tenant_sync', '{}'::jsonb, 'serial', job_key => 'by-sql')`);
    assert.deepEqual((await sql.query('select group_key, queue_name from job_queue.jobs where id = $1', [job.id])).rows, [{ group_key: null, queue_name: 'serial' }]);
  });

  const bad: Array<[string, Record<string, unknown>]> = [
    ['an empty group', { group: '' }],
    ['a group of 129 characters', { group: 'g'.repeat(129) }],
    ['a number', { group: 42 }],
    ['a group with a named queue', { group: 'acme', queueName: 'serial' }],
  ];
  for (const [what, spec] of bad) {
    it(`${what}: JQ_INVALID_GROUP from add and addMany, nothing written`, async () => {
      const before = (await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n;
      await assert.rejects(t.jobs.add('tenant_sync' as never, {} as never, spec as never), { code: 'JQ_INVALID_GROUP' });
      await assert.rejects(t.jobs.addMany([{ identifier: 'tenant_sync' }, { identifier: 'tenant_sync', ...spec }] as never), { code: 'JQ_INVALID_GROUP' });
      assert.equal((await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n, before);
    });
  }

  it('a flow step with a group: JQ_INVALID_FLOW, nothing written', async () => {
    const before = (await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n;
    await assert.rejects(t.jobs.addFlow([{ ref: 'a', identifier: 'tenant_sync', group: 'acme' } as never]), { code: 'JQ_INVALID_FLOW' });
    assert.equal((await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n, before);
  });

  it("the handler's ctx.job.group, and a job without one", async () => {
    await sql.query('delete from job_queue.jobs');
    const worker = await createTestApp({ url: db.url, providers: [Tenants], jobQueue: { pollInterval: 100 } });
    try {
      Tenants.seen.length = 0;
      await worker.jobs.addMany([{ identifier: 'tenant_sync', group: 'acme' }, { identifier: 'tenant_sync' }] as never);
      await waitFor('both to run', async () => Tenants.seen.length === 2);
      assert.deepEqual([...Tenants.seen].sort(), ['acme', null].sort());
    } finally {
      await worker.close();
    }
  });
});
