import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { LossyProxy } from '../support/tcp-proxy';
import { waitFor, waitForNoJobs } from '../support/wait';

const runs: Array<{ id: string; attempts: number }> = [];

@Injectable()
class LostReplyTasks {
  @Task('work')
  async work(_payload: unknown, ctx: JobContext) {
    runs.push({ id: ctx.job.id, attempts: ctx.job.attempts });
  }
}

/**
 * The claim commits in the server, but its reply never reaches the worker (the connection
 * dies on the way back). The rows are locked for the worker, which does not know them: its
 * next heartbeat must give them back, rather than leave them locked until it shuts down.
 */
describe('a claim whose reply was lost', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let proxy: LossyProxy;
  let t: TestApp;
  const events: JobQueueEvent[] = [];

  before(async () => {
    db = await createTestDatabase('claim_reply_lost');
    sql = await connect(db.url);
    const url = new URL(db.url);
    // the claim's reply is the only one with this column
    proxy = await LossyProxy.start({ host: url.hostname, port: Number(url.port || 5432) }, 'candidate_count');
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    // no polling to speak of: the worker claims when woken by a notification
    t = await createTestApp({
      url: url.toString(),
      providers: [LostReplyTasks],
      jobQueue: { pollInterval: 3_600_000, heartbeatInterval: 200, workerTimeout: 2000 },
    });
    t.worker.events$.subscribe((e) => events.push(e));
  });
  after(async () => {
    await t.close();
    await proxy.stop();
    await sql.end();
    await db.drop();
  });

  it('the rows it locked are given back at the next heartbeat, with the attempt returned, and then run once', async () => {
    await waitFor('the worker\'s first claim', () => proxy.seen > 0);
    proxy.arm();
    const [job] = (await sql.query(`select id::text from job_queue.add_job('work')`)).rows;
    await waitFor('the claim\'s reply to be lost', () => proxy.lost === 1);
    // the proxy counts the loss as it cuts the connection; the worker hears of it a few ticks later
    await waitFor('the worker to see its claim fail', () => events.some((e) => e.type === 'worker:error' && e.during === 'claim'));
    await waitForNoJobs(sql);
    assert.deepEqual(runs, [{ id: job.id, attempts: 1 }], 'it ran once, and the lost claim did not count an attempt');
  });
});
