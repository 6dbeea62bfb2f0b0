import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { LossyProxy } from '../support/tcp-proxy';
import { waitFor } from '../support/wait';

/** The release's reply is the only one with this column (sql/release.ts releaseJobs). */
const RELEASE_REPLY = 'busy\0';

let proxy: LossyProxy;
/** proxy.seen once the lost reply was counted: a later release reply is the retried flush's. */
let seenAtLoss = Infinity;
const attempts: number[] = [];

@Injectable()
class FlakyTasks {
  /** Fails its first attempt (retried at once); its second waits until the first's retried release has been written. */
  @Task('flaky', { retryDelay: () => 0 })
  async flaky(_payload: unknown, ctx: JobContext) {
    attempts.push(ctx.job.attempts);
    if (ctx.job.attempts === 1) {
      proxy.arm(RELEASE_REPLY);
      throw new Error('the first attempt fails');
    }
    if (ctx.job.attempts === 2) await waitFor("the first attempt's release to be written again", () => proxy.seen > seenAtLoss);
  }
}

/**
 * Found by the chaos soak (issue 29; CHAOS_SEED=2102047154, a lost-release-reply): a release
 * commits but its reply is lost, so the worker writes the flush again. The failure it carried
 * had made the job due at once, and this worker had claimed it again meanwhile: the retried
 * failure landed on that new claim, failing the attempt that was running (and then succeeded),
 * and the job ran a third time. A release now names the claim it is for (core/claim-token.ts).
 */
describe('a release whose reply was lost', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    db = await createTestDatabase('release_reply_lost');
    sql = await connect(db.url);
    const url = new URL(db.url);
    proxy = await LossyProxy.start({ host: url.hostname, port: Number(url.port || 5432) }, RELEASE_REPLY);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    t = await createTestApp({ url: url.toString(), providers: [FlakyTasks], jobQueue: { pollInterval: 100, localStart: false } });
  });
  after(async () => {
    await t?.close();
    await proxy?.stop();
    await sql?.end();
    await db?.drop();
  });

  it('is written again without touching the job claimed anew since: the second attempt completes it, and it runs twice, not three times', async () => {
    const job = await t.jobs.add('flaky' as never, {} as never);
    await waitFor("the first attempt's release reply to be lost", () => proxy.lost === 1);
    seenAtLoss = proxy.seen;
    const done = await t.jobs.waitForJob(job.id, { timeout: 30_000 });
    assert.equal(done.state, 'completed');
    assert.deepEqual(attempts, [1, 2], `the first attempt failed, the second completed the job; errors: ${JSON.stringify(done.errors)}`);
    assert.deepEqual(
      done.errors.map((e) => [e.attempt, e.message]),
      [[1, 'the first attempt fails']],
      "one failure recorded, the first attempt's, once",
    );
  });
});
