import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { JobQueueEntities, JobQueueModule, JobQueueService, JobQueueWorker, Task } from '../../libs/job-queue/src';
import type { BenchConfig } from './config';
import { HandlerProbe } from './handler-probe';
import type { QueueUnderTest } from './suite';

const TASK = 'bench_noop';

@Injectable()
class BenchTasks {
  constructor(private readonly probe: HandlerProbe) {}

  @Task(TASK)
  noop(): void {
    this.probe.hit();
  }
}

/** This library, the way a user sets it up: a Nest application context with TypeORM and JobQueueModule. */
export async function openNestJobQueue(url: string, config: BenchConfig): Promise<QueueUnderTest> {
  const probe = new HandlerProbe();

  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, entities: JobQueueEntities, extra: { max: config.poolSize } }),
      // worker: false so that the worker does not start with the app: the drain times worker.start().
      JobQueueModule.forRoot({ concurrency: config.concurrency, pollInterval: config.pollInterval, worker: false }),
    ],
    providers: [BenchTasks, { provide: HandlerProbe, useValue: probe }],
  })
  class BenchModule {}

  const app = await NestFactory.createApplicationContext(BenchModule, { logger: false, abortOnError: false });
  const jobs = app.get(JobQueueService);
  const worker = app.get(JobQueueWorker);
  const dataSource = app.get(DataSource);

  return {
    name: 'nestjs-job-queue',
    probe,
    addOne: (index) => jobs.add(TASK, { index }),
    addMany: (from, count) => jobs.addMany(Array.from({ length: count }, (_, k) => ({ identifier: TASK, payload: { index: from + k } }))),
    deleteAllJobs: async () => {
      await dataSource.query('delete from job_queue.jobs');
    },
    countJobs: async () => (await dataSource.query<Array<{ count: number }>>('select count(*)::int as count from job_queue.jobs'))[0].count,
    // One mode only: the worker has no batching knobs.
    startWorker: async () => {
      await worker.start();
      return { stop: () => worker.stop() };
    },
    close: () => app.close(),
  };
}
