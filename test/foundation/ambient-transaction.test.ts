import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { ClsPluginTransactional, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ClsModule, ClsService } from 'nestjs-cls';
import { DataSource } from 'typeorm';
import { JobQueueService, Task, type JobContext } from '../../libs/job-queue/src';
import { drain } from '../../libs/job-queue/src/testing';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';

/** An app's service, written as @nestjs-cls/transactional users write theirs: no manager anywhere. */
@Injectable()
class Orders {
  constructor(
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
    private readonly jobs: JobQueueService,
    private readonly dataSource: DataSource,
  ) {}

  @Transactional()
  async place(id: number, fail = false) {
    await this.txHost.tx.query('insert into orders (id) values ($1)', [id]);
    const job = await this.jobs.add('ship_order', { id });
    await this.jobs.addMany([{ identifier: 'ship_order', payload: { id, copy: true } }]);
    if (fail) throw new Error('payment declined');
    return job;
  }

  /**
   * Inside a @Transactional() method, jobs added with an explicit `manager` of a transaction
   * of their own: `fail` says which of the two transactions rolls back.
   */
  @Transactional()
  async placeBeside(id: number, fail: 'ambient' | 'explicit') {
    await this.txHost.tx.query('insert into orders (id) values ($1)', [id]);
    const explicit = this.dataSource.transaction(async (manager) => {
      await this.jobs.add('ship_order', { id }, { manager });
      await this.jobs.addMany([{ identifier: 'ship_order', payload: { id, copy: true } }], { manager });
      if (fail === 'explicit') throw new Error('explicit rolled back');
    });
    if (fail === 'explicit') await assert.rejects(explicit, /explicit rolled back/);
    else await explicit;
    if (fail === 'ambient') throw new Error('ambient rolled back');
  }
}

const seen: Array<[string, unknown]> = [];

/** A handler that is itself @Transactional() and uses ClsService: each job runs in a CLS context of its own. */
@Injectable()
class Shipping {
  constructor(
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
    private readonly cls: ClsService,
  ) {}

  @Task('ship_order')
  @Transactional()
  async ship(payload: { id: number }, ctx: JobContext) {
    this.cls.set('job', ctx.job.id);
    await new Promise((resolve) => setTimeout(resolve, 10)); // the other jobs run meanwhile
    seen.push([ctx.job.id, this.cls.get('job')]);
    await this.txHost.tx.query('insert into shipments (order_id) values ($1)', [payload.id]);
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
      providers: [Orders, Shipping],
      imports: [
        ClsModule.forRoot({
          global: true,
          plugins: [new ClsPluginTransactional({ adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: DataSource }) })],
        }),
      ],
      jobQueue: { worker: false },
    });
    await ctx.sql.query('create table orders (id int primary key); create table shipments (order_id int not null)');
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

  it('each job runs in its own CLS context: ClsService and @Transactional() work inside handlers', async () => {
    await drain(ctx.t.app);
    const shipped = (await ctx.sql.query('select order_id from shipments order by order_id')).rows.map((row) => row.order_id);
    assert.deepEqual(shipped, [1, 1, 3], 'the three committed jobs ran, each writing in its own transaction');
    assert.equal(seen.length, 3);
    assert.deepEqual(seen.filter(([id, fromCls]) => id !== fromCls), [], 'each handler read back its own job id from CLS');
  });

  // After the drain above: the jobs these add are never run.
  it('an explicit manager wins over the ambient transaction: the jobs commit or roll back with its transaction', async () => {
    await assert.rejects(ctx.t.app.get(Orders).placeBeside(4, 'ambient'), /ambient rolled back/);
    assert.deepEqual(await order(4), [], 'the ambient transaction rolled back');
    assert.deepEqual(await jobsFor(4), [{ id: 4 }, { id: 4, copy: true }], "add() and addMany() committed with the explicit manager's transaction");

    await ctx.t.app.get(Orders).placeBeside(5, 'explicit');
    assert.deepEqual(await order(5), [{ id: 5 }], 'the ambient transaction committed');
    assert.deepEqual(await jobsFor(5), [], "add() and addMany() rolled back with the explicit manager's transaction");
  });
});
