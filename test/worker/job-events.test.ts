import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Controller, Injectable, Module, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { JobQueueEntities, JobQueueModule, JobQueueService, JobQueueWorker, OnJobEvent, Task, type JobQueueEventOf } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

const seen: string[] = [];
const logged: string[] = [];

@Injectable()
class Listeners {
  @OnJobEvent('job:failed')
  async onFailed(event: JobQueueEventOf<'job:failed'>) {
    await Promise.resolve();
    seen.push(`failed ${event.job.taskIdentifier} ${(event.error as Error).message}`);
  }

  @OnJobEvent('job:success', 'job:error')
  onDone(event: JobQueueEventOf<'job:success' | 'job:error'>) {
    seen.push(`${event.type} ${event.job.taskIdentifier}`);
  }

  /** A listener that throws: logged, and the worker goes on. */
  @OnJobEvent('job:start')
  broken() {
    throw new Error('listener bug');
  }

  /** An async listener that rejects, for the jobs of one task: logged, nothing unhandled, and the job goes on. */
  @OnJobEvent('job:start')
  async brokenAsync(event: JobQueueEventOf<'job:start'>) {
    if (event.job.taskIdentifier !== 'async_listener_target') return;
    await Promise.resolve();
    rejectedFor.push(event.job.id);
    throw new Error('async listener bug');
  }
}

/** The jobs whose job:start the async listener rejected on. */
const rejectedFor: string[] = [];

/** A task on a controller, found as @nestjs/schedule finds @Cron there. */
@Controller()
class TasksController {
  @Task('on_controller')
  run() {
    return 'from a controller';
  }

  @Task('fails', { maxAttempts: 2, retryDelay: () => 0 })
  fails() {
    throw new Error('no luck');
  }

  @Task('async_listener_target')
  target() {
    return 'done';
  }
}

describe('@OnJobEvent, @Task on controllers, forRoot() without options', () => {
  let ctx: TestAppContext;
  const unhandled: unknown[] = [];
  const recordUnhandled = (reason: unknown) => void unhandled.push(reason);
  before(async () => {
    process.on('unhandledRejection', recordUnhandled);
    const logger: LoggerService = { log: () => undefined, warn: () => undefined, error: (message: unknown) => void logged.push(String(message)) };
    ctx = await openTestApp('job_events', { providers: [Listeners], http: { controllers: [TasksController] }, logger });
  });
  after(async () => {
    await closeTestApp(ctx);
    process.off('unhandledRejection', recordUnhandled);
  });

  it('calls each decorated method with the events of its types; a throwing listener is logged and changes nothing', async () => {
    const ok = await ctx.t.jobs.add('on_controller', {});
    const bad = await ctx.t.jobs.add('fails', {});
    await waitFor('the events to reach the listeners', () => seen.length === 3);
    assert.deepEqual(seen.slice().sort(), ['failed fails no luck', 'job:error fails', 'job:success on_controller']);
    // the events come before the release is written: the rows follow
    await waitFor('both jobs to be finished', async () => (await ctx.t.jobs.getJob(bad.id))?.state === 'failed' && (await ctx.t.jobs.getJob(ok.id))?.state === 'completed');
    assert.equal((await ctx.t.jobs.getJob(ok.id))?.result, 'from a controller', 'the task on the controller ran');
    assert.ok(logged.some((line) => /@OnJobEvent\('job:start'\) on Listeners\.broken threw: listener bug/.test(line)), logged.join('\n'));
  });

  it('an async listener that rejects: the rejection is logged, nothing is unhandled, and the job completes', async () => {
    const job = await ctx.t.jobs.add('async_listener_target', {});
    // The listener rejects as the handler starts; the job's row is written completed later, after several turns of the event loop.
    await waitFor('the job to complete', async () => (await ctx.t.jobs.getJob(job.id))?.state === 'completed');
    assert.deepEqual(rejectedFor, [job.id], 'the listener rejected');
    assert.deepEqual(unhandled, [], 'no unhandled rejection');
    assert.equal((await ctx.t.jobs.getJob(job.id))?.result, 'done');
    const line = /@OnJobEvent\('job:start'\) on Listeners\.brokenAsync threw: async listener bug/;
    assert.equal(logged.filter((entry) => line.test(entry)).length, 1, logged.join('\n'));
  });

  it('JobQueueModule.forRoot() with no options starts with every default', async () => {
    const db = await createTestDatabase('for_root_defaults');
    @Module({ imports: [TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: JobQueueEntities }), JobQueueModule.forRoot()] })
    class DefaultsModule {}
    const app = await NestFactory.createApplicationContext(DefaultsModule, { logger: false });
    try {
      assert.equal(app.get(JobQueueWorker).status().running, true);
      const jobs = app.get(JobQueueService);
      const none = { blocked: 0, waiting: 0, scheduled: 0, running: 0, retrying: 0, completed: 0, failed: 0, cancelled: 0 };
      assert.deepEqual(await jobs.countJobs(), { byState: none, byTask: {}, byQueue: {} }, 'an empty queue');
      // a job of a task this app does not run, added from SQL, stays waiting: counted in every breakdown
      await app.get(DataSource).query(`select job_queue.add_job('elsewhere', queue_name => 'q')`);
      const one = { ...none, waiting: 1 };
      assert.deepEqual(await jobs.countJobs(), { byState: one, byTask: { elsewhere: one }, byQueue: { q: one } });
    } finally {
      await app.close();
      await db.drop();
    }
  });
});
