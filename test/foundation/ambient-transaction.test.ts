import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { ClsPluginTransactional, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ClsModule } from 'nestjs-cls';
import { DataSource } from 'typeorm';
import { JobQueueService } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';

/** An app's service, written as @nestjs-cls/transactional users write theirs: no manager anywhere. */
@Injectable()
class Orders {
  constructor(
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
    private readonly jobs: JobQueueService,
  ) {}

  @Transactional()
  async place(id: number, fail = false) {
    await this.txHost.tx.query('insert into orders (id) values ($1)', [id]);
    const job = await this.jobs.add('ship_order', { id });
    await this.jobs.addMany([{ identifier: 'ship_order', payload: { id, copy: true } }]);
    if (fail) throw new Error('payment declined');
    return job;
  }
}

/**
 * add() and addMany() inside a @Transactional() method join its transaction through
 * TransactionHost: the jobs exist if and only if the method's writes commit. Outside one,
 * add() commits on its own as before.
 */
describe('ambient transactions (@nestjs-cls/transactional)', () => {
  let ctx: TestAppContext;
  before(async () => {
    ctx = await openTestApp('ambient_tx', {
      providers: [Orders],
      imports: [
        ClsModule.forRoot({
          global: true,
          plugins: [new ClsPluginTransactional({ adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: DataSource }) })],
        }),
      ],
      jobQueue: { worker: false, externalTasks: ['ship_order'] },
    });
    await ctx.sql.query('create table orders (id int primary key)');
  });
  after(() => closeTestApp(ctx));

  const jobsFor = async (id: number) => (await ctx.sql.query(`select payload from job_queue.jobs where payload->>'id' = $1 order by id`, [String(id)])).rows.map((row) => row.payload);
  const order = async (id: number) => (await ctx.sql.query('select id from orders where id = $1', [id])).rows;

  it('the jobs commit with the method', async () => {
    await ctx.t.app.get(Orders).place(1);
    assert.deepEqual(await order(1), [{ id: 1 }]);
    assert.deepEqual(await jobsFor(1), [{ id: 1 }, { id: 1, copy: true }]);
  });

  it('the jobs roll back with the method: no job without its order', async () => {
    await assert.rejects(ctx.t.app.get(Orders).place(2, true), /payment declined/);
    assert.deepEqual(await order(2), []);
    assert.deepEqual(await jobsFor(2), [], 'neither add() nor addMany() left a job behind');
  });

  it('outside a transaction, add() commits on its own', async () => {
    const job = await ctx.t.jobs.add('ship_order', { id: 3 });
    assert.equal(job.state, 'waiting');
    assert.deepEqual(await jobsFor(3), [{ id: 3 }]);
  });
});
