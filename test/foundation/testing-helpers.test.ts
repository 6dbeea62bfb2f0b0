import assert from 'node:assert/strict';
import { after, before, describe, it, mock } from 'node:test';
import { Injectable } from '@nestjs/common';
import { JobQueueService, Task, type JobContext } from '../../libs/job-queue/src';
import { drain, findJobs, runTask } from '../../libs/job-queue/src/testing';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';

/** An app's own code, as its tests would exercise it. */
@Injectable()
class Signups {
  constructor(private readonly jobs: JobQueueService) {}

  async signUp(userId: number) {
    await this.jobs.add('send_welcome', { userId, locale: 'en' });
  }
}

@Injectable()
class WelcomeTasks {
  @Task('send_welcome', { maxAttempts: 3 })
  async send(payload: { userId: number }, ctx: JobContext) {
    ctx.progress(50);
    if (ctx.signal.aborted) throw ctx.signal.reason;
    return { sentTo: payload.userId, attempt: ctx.job.attempts };
  }
}

/** nestjs-job-queue/testing used as an app's tests use it: runTask, findJobs, drain, and a spy on a handler. */
describe('testing helpers (nestjs-job-queue/testing)', () => {
  let ctx: TestAppContext;
  before(async () => {
    ctx = await openTestApp('testing_helpers', { providers: [Signups, WelcomeTasks], jobQueue: { worker: false } });
  });
  after(() => closeTestApp(ctx));

  it('runTask calls the handler directly, with its context, and nothing is queued', async () => {
    const run = await runTask(ctx.t.app, 'send_welcome', { userId: 7 }, { attempt: 2 });
    assert.deepEqual(run, { result: { sentTo: 7, attempt: 2 }, progress: [50] });
    assert.deepEqual(await findJobs(ctx.t.app, { task: 'send_welcome' }), []);
    const aborted = new AbortController();
    aborted.abort(new Error('stop'));
    await assert.rejects(runTask(ctx.t.app, 'send_welcome', { userId: 7 }, { signal: aborted.signal }), /stop/);
    await assert.rejects(runTask(ctx.t.app, 'nope' as 'send_welcome', { userId: 1 }), { code: 'JQ_UNKNOWN_TASK' });
  });

  it('findJobs finds what a call added by payload; drain runs it; a spy on the handler sees the call', async () => {
    const handler = mock.method(ctx.t.app.get(WelcomeTasks), 'send');
    await ctx.t.app.get(Signups).signUp(42);
    await ctx.t.app.get(Signups).signUp(43);
    const [added] = await findJobs(ctx.t.app, { task: 'send_welcome', payload: { userId: 42 } });
    assert.deepEqual([added.state, added.payload], ['waiting', { userId: 42, locale: 'en' }]);
    assert.equal((await findJobs(ctx.t.app, { task: 'send_welcome' })).length, 2);

    await drain(ctx.t.app);
    assert.equal(handler.mock.callCount(), 2, 'the spy saw both runs');
    assert.deepEqual(handler.mock.calls.map((call) => (call.arguments[0] as { userId: number }).userId).sort(), [42, 43]);
    const [done] = await findJobs(ctx.t.app, { task: 'send_welcome', payload: { userId: 42 }, state: 'completed' });
    assert.deepEqual(done.result, { sentTo: 42, attempt: 1 });
  });
});
