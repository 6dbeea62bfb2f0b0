import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor, waitForNoJobs } from '../support/wait';

const limitedRuns: string[] = [];
let streaming = true;
let streamed = 0;

/** `busy` keeps the worker's slots full: each run adds the next one, so 50 stay due while it streams. */
@Injectable()
class StreamTasks {
  @Task('busy')
  async busy(_payload: unknown, ctx: JobContext) {
    streamed += 1;
    await new Promise((resolve) => setTimeout(resolve, 5));
    if (streaming) await ctx.addJob('busy' as never, {} as never);
  }

  @Task('limited', { globalConcurrency: 1 })
  async limited(_payload: unknown, ctx: JobContext) {
    limitedRuns.push(ctx.job.id);
  }
}

/**
 * Found by the chaos soak (issue 29, seed 2, a run whose retrying jobs kept every slot busy):
 * a worker claimed the tasks without a limit first and the limited ones (globalConcurrency)
 * into what that left, so while other jobs filled every claim, a limited job waited for ever.
 * The two claims now take turns at going first.
 */
describe('limited and unlimited tasks take turns at claiming', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    db = await createTestDatabase('limited_turns');
    sql = await connect(db.url);
    t = await createTestApp({ url: db.url, providers: [StreamTasks], jobQueue: { concurrency: 2, pollInterval: 100 } });
  });
  after(async () => {
    streaming = false;
    await t?.close();
    await sql?.end();
    await db?.drop();
  });

  it('a limited job runs while a stream of other jobs keeps every slot busy', async () => {
    await t.jobs.addMany(Array.from({ length: 50 }, () => ({ identifier: 'busy' })));
    await waitFor('the stream to run', () => streamed >= 20);
    const job = await t.jobs.add('limited' as never, {} as never);
    const from = streamed;
    await waitFor(() => `the limited job to run (the stream ran ${streamed - from} jobs meanwhile)`, () => limitedRuns.length > 0, 20_000);
    assert.deepEqual(limitedRuns, [job.id]);
    const [row] = (await sql.query(`select count(*)::int as n from job_queue.jobs where task_identifier = 'busy' and run_at <= now()`)).rows;
    assert.ok(row.n >= 40, `the stream still kept ${row.n} jobs due when it ran`);
    streaming = false;
    await waitForNoJobs(sql);
  });
});
