import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { DataSource, type EntityManager } from 'typeorm';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';

/** What ctx.addJob threw when given a manager outside any transaction: asserted after the run. */
const fromHandler: string[] = [];

@Injectable()
class SpawningTasks {
  constructor(private readonly dataSource: DataSource) {}

  @Task('spawner')
  async spawn(_payload: unknown, ctx: JobContext) {
    await ctx.addJob('child', {}, { manager: this.dataSource.manager }).catch((error: { code?: string }) => fromHandler.push(String(error.code)));
  }

  @Task('child')
  async child() {}
}

describe('a manager that would not make the job part of the caller\'s transaction is refused before anything is written', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let t: TestApp;
  let sql: Client;
  let other: DataSource;

  before(async () => {
    db = await createTestDatabase('misused_manager');
    t = await createTestApp({ url: db.url, providers: [SpawningTasks], jobQueue: { worker: false } });
    sql = await connect(db.url);
    other = await new DataSource({ type: 'postgres', url: db.url }).initialize();
  });
  after(async () => {
    await other.destroy();
    await sql.end();
    await t.close();
    await db.drop();
  });

  const jobCount = async () => (await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n as number;

  /** Runs `use` in a transaction of `source` that then rolls back, and returns what `use` threw. */
  const inRolledBackTransaction = async (source: DataSource, use: (manager: EntityManager) => Promise<unknown>) => {
    let thrown: unknown;
    await assert.rejects(
      source.transaction(async (manager) => {
        thrown = await use(manager).then(() => undefined, (error: unknown) => error);
        throw new Error('rollback');
      }),
      /rollback/,
    );
    return thrown as { code?: string } | undefined;
  };

  it('the DataSource\'s own manager, inside a transaction callback: JQ_NO_TRANSACTION', async () => {
    const thrown = await inRolledBackTransaction(t.dataSource, () => t.jobs.add('child', {}, { manager: t.dataSource.manager }));
    assert.equal(thrown?.code, 'JQ_NO_TRANSACTION');
    const many = await inRolledBackTransaction(t.dataSource, () => t.jobs.addMany([{ identifier: 'child' }], { manager: t.dataSource.manager }));
    assert.equal(many?.code, 'JQ_NO_TRANSACTION');
    assert.equal(await jobCount(), 0, 'nothing outlived the rollback');
  });

  it('a manager whose transaction has ended: JQ_NO_TRANSACTION', async () => {
    let stale: EntityManager | undefined;
    await t.dataSource.transaction(async (manager) => {
      stale = manager;
    });
    await assert.rejects(t.jobs.add('child', {}, { manager: stale }), { code: 'JQ_NO_TRANSACTION' });
    assert.equal(await jobCount(), 0);
  });

  it('a transaction of another DataSource: JQ_WRONG_DATA_SOURCE', async () => {
    const thrown = await inRolledBackTransaction(other, (manager) => t.jobs.add('child', {}, { manager }));
    assert.equal(thrown?.code, 'JQ_WRONG_DATA_SOURCE');
    const many = await inRolledBackTransaction(other, (manager) => t.jobs.addMany([{ identifier: 'child' }], { manager }));
    assert.equal(many?.code, 'JQ_WRONG_DATA_SOURCE');
    assert.equal(await jobCount(), 0);
  });

  it('something that is not an EntityManager: JQ_INVALID_SPEC', async () => {
    await assert.rejects(t.jobs.add('child', {}, { manager: { query: async () => [] } as never }), { code: 'JQ_INVALID_SPEC' });
    assert.equal(await jobCount(), 0);
  });

  it('ctx.addJob in a handler is refused the same way', async () => {
    await t.jobs.add('spawner');
    await t.worker.runUntilIdle();
    assert.deepEqual(fromHandler, ['JQ_NO_TRANSACTION']);
    assert.equal((await sql.query(`select count(*)::int as n from job_queue.jobs where task_identifier = 'child'`)).rows[0].n, 0);
  });

  it('a manager in a transaction of the queue\'s DataSource still joins it', async () => {
    const thrown = await inRolledBackTransaction(t.dataSource, (manager) => t.jobs.add('child', {}, { manager }));
    assert.equal(thrown, undefined);
    assert.equal(await jobCount(), 0, 'rolled back with the caller');
  });
});
