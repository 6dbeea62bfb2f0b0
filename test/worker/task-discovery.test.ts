import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable, Scope } from '@nestjs/common';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { createTestDatabase } from '../support/database';

const seen: Array<{ self: unknown; payload: unknown; ctx: JobContext }> = [];

@Injectable()
class GreetingTasks {
  @Task('greet', { maxAttempts: 4, queueName: 'greetings', priority: 2 })
  async greet(payload: { to: string }, ctx: JobContext) {
    seen.push({ self: this, payload, ctx });
    await ctx.addJob('followup', { after: ctx.job.id });
    return `hello ${payload.to}`;
  }

  @Task('followup')
  async followup(payload: unknown, ctx: JobContext) {
    seen.push({ self: this, payload, ctx });
  }
}

@Injectable()
class DuplicateTasks {
  @Task('greet')
  async again() {}
}

@Injectable({ scope: Scope.REQUEST })
class RequestScopedTasks {
  @Task('per_request')
  async handle() {}
}

describe('@Task discovery and the handler call', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let t: TestApp;

  before(async () => {
    db = await createTestDatabase('discovery');
    t = await createTestApp({ url: db.url, providers: [GreetingTasks], jobQueue: { worker: false } });
  });
  after(async () => {
    await t.close();
    await db.drop();
  });

  it('calls the handler with its payload and a JobContext, this bound to its provider', async () => {
    const events: JobQueueEvent[] = [];
    const subscription = t.worker.events$.subscribe((e) => events.push(e));
    const job = await t.jobs.add('greet', { to: 'Ada' }, { flags: ['f'], jobKey: 'greet:ada' });
    await t.worker.runUntilIdle();
    subscription.unsubscribe();

    const [greet, followup] = seen;
    const provider = t.app.get(GreetingTasks);
    assert.equal(greet.self, provider, 'this is the provider instance the app holds');
    assert.equal(followup.self, provider);
    assert.deepEqual(greet.payload, { to: 'Ada' });
    assert.deepEqual(
      { ...greet.ctx.job },
      { id: job.id, taskIdentifier: 'greet', attempts: 1, maxAttempts: 4, queueName: 'greetings', group: null, key: 'greet:ada', runAt: job.runAt, flags: ['f'], createdAt: job.createdAt, flowId: job.id, flowRef: null },
    );
    assert.ok(greet.ctx.signal instanceof AbortSignal);
    assert.equal(typeof greet.ctx.logger.log, 'function');
    assert.deepEqual(followup.payload, { after: job.id }, 'ctx.addJob added a job that ran in the same drain');
    assert.deepEqual(
      events.filter((e) => 'job' in e && e.job.id === job.id).map((e) => e.type),
      ['job:start', 'job:success', 'job:complete'],
    );
  });

  it('applies the task options as defaults for jobs added with its identifier', async () => {
    const job = await t.jobs.add('greet', { to: 'Bo' }, { runAt: new Date(Date.now() + 60_000) });
    assert.equal(job.maxAttempts, 4);
    assert.equal(job.queueName, 'greetings');
    assert.equal(job.priority, 2);
    const overridden = await t.jobs.add('greet', { to: 'Cy' }, { maxAttempts: 1, queueName: 'other', priority: 0, runAt: new Date(Date.now() + 60_000) });
    assert.deepEqual([overridden.maxAttempts, overridden.queueName, overridden.priority], [1, 'other', 0]);
  });

  it('two handlers for one identifier stop the app, naming both', async () => {
    await assert.rejects(
      createTestApp({ url: db.url, providers: [GreetingTasks, DuplicateTasks], jobQueue: { worker: false } }),
      (error: { code?: string; message: string }) =>
        error.code === 'JQ_DUPLICATE_TASK' && /GreetingTasks\.greet/.test(error.message) && /DuplicateTasks\.again/.test(error.message),
    );
  });

  it('@Task on a request-scoped provider stops the app, naming it', async () => {
    await assert.rejects(
      createTestApp({ url: db.url, providers: [RequestScopedTasks], jobQueue: { worker: false } }),
      (error: { code?: string; message: string }) => error.code === 'JQ_REQUEST_SCOPED_TASK' && /RequestScopedTasks\.handle/.test(error.message),
    );
  });

  it('bad task options stop the app', async () => {
    @Injectable()
    class BadOptions {
      @Task('bad', { maxAttempts: 0 })
      async handle() {}
    }
    await assert.rejects(createTestApp({ url: db.url, providers: [BadOptions], jobQueue: { worker: false } }), { code: 'JQ_INVALID_TASK_OPTIONS' });
  });
});
