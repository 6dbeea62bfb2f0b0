/**
 * Compiled, never run, by test/foundation/typed-tasks.test.ts (`tsc -p test/types`): the
 * JobQueueTasks augmentation an app writes, and calls that must compile or must not. Every
 * `@ts-expect-error` line is a call the compiler must refuse: if it compiled, tsc would
 * report the directive as unused, and the test fails.
 */
import { Injectable } from '@nestjs/common';
import { JobQueueService, Task, type JobContext, type TaskName, type TaskPayload } from 'nestjs-job-queue';

declare module 'nestjs-job-queue' {
  interface JobQueueTasks {
    send_email: { to: string; subject?: string };
    rebuild_index: undefined;
  }
}

@Injectable()
export class Tasks {
  constructor(private readonly jobs: JobQueueService) {}

  @Task('send_email')
  async sendEmail(payload: TaskPayload<'send_email'>, ctx: JobContext) {
    const to: string = payload.to;
    await ctx.addJob('rebuild_index');
    // @ts-expect-error: a wrong payload for ctx.addJob
    await ctx.addJob('send_email', { to: 1 });
    return to;
  }

  async calls(dynamicName: string) {
    const job = await this.jobs.add('send_email', { to: 'ada@example.com' }, { queueName: 'mail' });
    const to: string = job.payload.to;
    await this.jobs.add('rebuild_index');
    await this.jobs.addMany([
      { identifier: 'send_email', payload: { to: 'a@example.com' } },
      { identifier: 'rebuild_index', priority: 1 },
    ]);

    // @ts-expect-error: an unknown task
    await this.jobs.add('send_emial', { to: 'x' });
    // @ts-expect-error: a wrong payload
    await this.jobs.add('send_email', { to: 42 });
    // @ts-expect-error: a missing payload
    await this.jobs.add('send_email');
    // @ts-expect-error: an extra field in the payload
    await this.jobs.add('send_email', { to: 'x', cc: 'y' });
    // @ts-expect-error: a wrong payload in addMany
    await this.jobs.addMany([{ identifier: 'send_email', payload: { subject: 'no recipient' } }]);
    // @ts-expect-error: an unknown task in addMany
    await this.jobs.addMany([{ identifier: 'nope' }]);
    // @ts-expect-error: a name built at run time, unchecked
    await this.jobs.add(dynamicName, {});

    // the escape hatch for names built at run time
    await this.jobs.add(dynamicName as TaskName, {} as TaskPayload<TaskName>);
    return to;
  }
}
