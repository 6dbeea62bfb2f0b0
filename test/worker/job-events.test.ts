import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Controller, Injectable, Module, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
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
}

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
}

describe('@OnJobEvent, @Task on controllers, forRoot() without options', () => {
  let ctx: TestAppContext;
  before(async () => {
    const logger: LoggerService = { log: () => undefined, warn: () => undefined, error: (message: unknown) => void logged.push(String(message)) };
    ctx = await openTestApp('job_events', { providers: [Listeners], http: { controllers: [TasksController] }, logger });
  });
  after(() => closeTestApp(ctx));

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

  it('JobQueueModule.forRoot() with no options starts with every default', async () => {
    const db = await createTestDatabase('for_root_defaults');
    @Module({ imports: [TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: JobQueueEntities }), JobQueueModule.forRoot()] })
    class DefaultsModule {}
    const app = await NestFactory.createApplicationContext(DefaultsModule, { logger: false });
    try {
      assert.equal(app.get(JobQueueWorker).status().running, true);
      assert.ok(await app.get(JobQueueService).countJobs());
    } finally {
      await app.close();
      await db.drop();
    }
  });
});
