import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { waitFor } from '../support/wait';

const starts = new Map<string, number>();
const gates = new Map<string, () => void>();

@Injectable()
class ParkedTasks {
  /** Counts its starts, then waits for the test. */
  @Task('parked')
  async parked(_payload: unknown, ctx: JobContext) {
    starts.set(ctx.job.id, (starts.get(ctx.job.id) ?? 0) + 1);
    await new Promise<void>((resolve) => gates.set(ctx.job.id, resolve));
  }
}

/**
 * Claims commit without waiting for the disk, so a server crash right after one can lose it:
 * the row is back in the queue while its handler runs. When the same worker claims it again,
 * it must not start a second handler in the same process.
 */
describe('a claim lost while its handler runs', () => {
  let ctx: TestAppContext;
  before(async () => {
    ctx = await openTestApp('lost_claim', { providers: [ParkedTasks], jobQueue: { pollInterval: 50 } });
  });
  after(() => closeTestApp(ctx));

  it('claimed again by the same worker, it is not started twice; it completes once', async () => {
    const job = await ctx.t.jobs.add('parked', {});
    await waitFor('the handler to start', () => gates.has(job.id));
    // what a lost claim leaves: the row as it was before the claim
    await ctx.sql.query(`update job_queue.jobs set locked_by = null, locked_at = null, started_at = null, attempts = 0 where id = $1`, [job.id]);
    await waitFor('the worker to claim it again', async () =>
      (await ctx.sql.query('select locked_by from job_queue.jobs where id = $1', [job.id])).rows[0]?.locked_by === ctx.t.worker.workerId);
    gates.get(job.id)!();
    assert.equal((await ctx.t.jobs.waitForJob(job.id, { timeout: 30_000 })).state, 'completed');
    assert.equal(starts.get(job.id), 1, 'one handler ran');
    assert.equal(ctx.t.worker.runningCount, 0, 'no second run is left behind');
  });
});
