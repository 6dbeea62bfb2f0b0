import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { JobQueueDatabase } from '../../libs/job-queue/src/db/job-queue-database';
import { createTestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitForNoJobs } from '../support/wait';

const active = new Map<string, number>();
const maxActive = new Map<string, number>();
const order = new Map<string, number[]>();
let unqueuedRuns = 0;
/** Jobs whose ctx.job.queueName was not the queue they were added to: asserted after the run, not in the handler. */
const wrongQueue: string[] = [];

@Injectable()
class QueueTasks {
  @Task('step')
  async step(payload: { queue: string; seq: number }, ctx: JobContext) {
    const now = (active.get(payload.queue) ?? 0) + 1;
    active.set(payload.queue, now);
    maxActive.set(payload.queue, Math.max(now, maxActive.get(payload.queue) ?? 0));
    (order.get(payload.queue) ?? order.set(payload.queue, []).get(payload.queue)!).push(payload.seq);
    if (ctx.job.queueName !== payload.queue) wrongQueue.push(`job ${ctx.job.id}: ${ctx.job.queueName} instead of ${payload.queue}`);
    await new Promise((resolve) => setTimeout(resolve, Math.random() * 4));
    active.set(payload.queue, active.get(payload.queue)! - 1);
  }

  @Task('free')
  async free() {
    unqueuedRuns++;
  }
}

describe('named queues', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;

  before(async () => {
    db = await createTestDatabase('named_queues');
  });
  after(async () => db.drop());

  it('one claim takes the head of each queue, never two jobs of one queue, plus free jobs', async () => {
    const t = await createTestApp({ url: db.url, providers: [QueueTasks], jobQueue: { worker: false } });
    try {
      const specs = [];
      for (let seq = 0; seq < 3; seq++) for (const queue of ['a', 'b', 'c']) specs.push({ identifier: 'step', payload: { queue, seq }, queueName: queue });
      specs.push({ identifier: 'free', payload: { queue: '', seq: 0 } }, { identifier: 'free', payload: { queue: '', seq: 1 } });
      const jobs = await t.jobs.addMany(specs);
      const database = t.app.get(JobQueueDatabase);
      // claims need their worker's row: one without (declared dead, say) gets nothing
      const claim = (worker: string) => database.pool.query(database.sql.claimJobs, [['step', 'free'], [], 20, worker, 20, []]);
      assert.deepEqual((await claim('w1')).rows, [], 'a worker with no row claims nothing');
      await database.pool.query(`insert into job_queue.workers (id) values ('w1'), ('w2')`);
      const first = await claim('w1');
      const firstIds = first.rows.map((r) => String(r.id)).sort((x, y) => Number(x) - Number(y));
      const heads = jobs.filter((j) => (j.payload as { seq: number }).seq === 0 && j.queueName).map((j) => j.id);
      const free = jobs.filter((j) => !j.queueName).map((j) => j.id);
      assert.deepEqual(firstIds, [...heads, ...free].sort((x, y) => Number(x) - Number(y)));
      // while w1 holds the queues, another worker gets nothing from them
      assert.equal((await claim('w2')).rowCount, 0);
      const locked = (await database.pool.query(`select queue_name, locked_by from job_queue.job_queues order by 1`)).rows;
      assert.deepEqual(locked, [{ queue_name: 'a', locked_by: 'w1' }, { queue_name: 'b', locked_by: 'w1' }, { queue_name: 'c', locked_by: 'w1' }]);
    } finally {
      // the hand-made claims of w1 and w2 are nobody's: clear them even if an assertion failed
      const sql = await connect(db.url);
      await sql.query(`delete from job_queue.jobs`);
      await sql.query(`update job_queue.job_queues set locked_at = null, locked_by = null`);
      await sql.query(`delete from job_queue.workers where id in ('w1', 'w2')`);
      await sql.end();
      await t.close();
    }
  });

  it('three workers never run two jobs of a queue at once, and keep each queue in order', async () => {
    const apps = await Promise.all([1, 2, 3].map(() => createTestApp({ url: db.url, providers: [QueueTasks], jobQueue: { concurrency: 10, worker: false } })));
    try {
      const queues = ['q1', 'q2', 'q3', 'q4', 'q5', 'q6'];
      const perQueue = 60;
      const specs = [];
      for (let seq = 0; seq < perQueue; seq++) {
        for (const queue of queues) specs.push({ identifier: 'step', payload: { queue, seq }, queueName: queue });
        specs.push({ identifier: 'free', payload: { queue: '', seq } });
      }
      await apps[0].jobs.addMany(specs);
      await Promise.all(apps.map((t) => t.worker.start()));
      const sql = await connect(db.url);
      await waitForNoJobs(sql);
      const lockedQueues = (await sql.query('select count(*)::int as n from job_queue.job_queues where locked_at is not null')).rows[0].n;
      await sql.end();
      for (const queue of queues) {
        assert.equal(maxActive.get(queue), 1, `queue ${queue} ran one job at a time`);
        assert.deepEqual(order.get(queue), Array.from({ length: perQueue }, (_, i) => i), `queue ${queue} kept its order`);
      }
      assert.equal(unqueuedRuns, perQueue);
      assert.deepEqual(wrongQueue, [], 'every handler saw its job in its own queue');
      assert.equal(lockedQueues, 0);
    } finally {
      await Promise.all(apps.map((t) => t.close()));
    }
  });
});
