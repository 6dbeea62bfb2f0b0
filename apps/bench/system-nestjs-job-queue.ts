import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { JobQueueEntities, JobQueueMaintenance, JobQueueModule, JobQueueService, JobQueueWorker, Task, type JobQueueModuleOptions, type RetentionOptions } from '../../libs/job-queue/src';
import { LocalStart } from '../../libs/job-queue/src/service/local-start';
import type { BenchConfig } from './config';
import { HandlerProbe } from './handler-probe';
import { SCHEMA, settleJobsTable, TASK } from './jobs-table';
import type { QueueUnderTest } from './suite';

@Injectable()
class BenchTasks {
  constructor(private readonly probe: HandlerProbe) {}

  @Task(TASK)
  noop(payload: { at?: number }): void {
    this.probe.hit(payload.at);
  }
}

/**
 * This library, the way a user sets it up: a Nest application context with TypeORM and
 * JobQueueModule, with the default retention (completed jobs kept 24 h in finished_jobs).
 */
export async function openNestJobQueue(url: string, config: BenchConfig): Promise<QueueUnderTest> {
  const queue = await openApp(url, config);
  return {
    ...queue,
    lifecycle: {
      openWithoutHistory: () => openApp(url, config, { completed: 0 }),
      addHistory: (rows) => addHistory(queue.dataSource, rows),
      settleTables: () => settleJobsTable(queue.dataSource),
      listenToQueueEvents: () => listenToQueueEvents(queue.jobs, queue),
    },
  };
}

/** One Nest application context with this library, its worker not started: also what each worker process of the scale lines runs (worker-process.ts). */
export async function openApp(
  url: string,
  config: BenchConfig,
  retention?: RetentionOptions,
  /** More module options (the pooler lines' transactionPooling and listenUrl). */
  moreOptions: Partial<JobQueueModuleOptions> = {},
): Promise<QueueUnderTest & { dataSource: DataSource; jobs: JobQueueService }> {
  const probe = new HandlerProbe();

  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, entities: JobQueueEntities, extra: { max: config.poolSize } }),
      // worker: false so that the worker does not start with the app: the drain times worker.start().
      JobQueueModule.forRoot({ concurrency: config.concurrency, pollInterval: config.pollInterval, worker: false, retention, ...moreOptions }),
    ],
    providers: [BenchTasks, { provide: HandlerProbe, useValue: probe }],
  })
  class BenchModule {}

  const app = await NestFactory.createApplicationContext(BenchModule, { logger: process.env.BENCH_LOGS ? undefined : false, abortOnError: false });
  const jobs = app.get(JobQueueService);
  const worker = app.get(JobQueueWorker);
  let offeredSlots: LocalStart['offered'];
  const maintenance = app.get(JobQueueMaintenance);
  const dataSource = app.get(DataSource);

  return {
    name: retention ? `nestjs-job-queue (retention ${JSON.stringify(retention)})` : 'nestjs-job-queue',
    probe,
    dataSource,
    jobs,
    addOne: (index, at) => jobs.add(TASK, at === undefined ? { index } : { index, at }),
    addMany: (from, count) => jobs.addMany(Array.from({ length: count }, (_, k) => ({ identifier: TASK, payload: { index: from + k } }))),
    countJobs: async () => (await dataSource.query<Array<{ count: number }>>(`select count(*)::int as count from ${SCHEMA}.jobs`))[0].count,
    // One mode only: the worker has no batching knobs. Started and stopped per drain.
    // With the maintenance rounds, as a worker started with its app runs them (its vacuums of jobs matter to long drains).
    // The bench reaches into the module here: an app sets `localStart` in its options.
    setLocalStart: (on) => {
      const localStart = app.get(LocalStart);
      if (!on) offeredSlots = localStart.offered;
      localStart.offer(on ? offeredSlots : undefined);
    },
    startWorker: async () => {
      await worker.start();
      maintenance.start();
      return {
        stop: async () => {
          await maintenance.stop();
          await worker.stop();
        },
      };
    },
    close: () => app.close(),
  };
}

/**
 * `rows` completed jobs in finished_jobs, in one statement: ids from the jobs' own sequence
 * (as if added earlier), finished over the last day, oldest first, as the default retention
 * keeps them; the statement triggers count them in finished_counts as for the worker's rows.
 * Then what a database a day into this would have had done: VACUUM ANALYZE (autovacuum would
 * otherwise start on the fresh rows during the drain); the drain's settleTables() then takes
 * a CHECKPOINT, so that the load's writes are not flushed during it.
 */
async function addHistory(dataSource: DataSource, rows: number): Promise<void> {
  await dataSource.query(ADD_HISTORY_SQL, [TASK, rows]);
  await dataSource.query(`vacuum analyze ${SCHEMA}.finished_jobs`);
}

/** The history's insert (addHistory; the history probes run it too): $1 the task, $2 how many rows. */
export const ADD_HISTORY_SQL = `insert into ${SCHEMA}.finished_jobs (id, task_identifier, queue_name, payload, priority, run_at, attempts, max_attempts, key, flags,
       state, result, progress, errors, last_error, worker_id, created_at, started_at, finished_at)
     select nextval(pg_get_serial_sequence('${SCHEMA}.jobs', 'id')), $1, null, jsonb_build_object('index', i), 0,
       t.finished_at - interval '20 milliseconds', 1, 25, null, '{}',
       'completed', null, null, null, null, 'bench-history-' || (i % 4), t.finished_at - interval '20 milliseconds',
       t.finished_at - interval '1 millisecond', t.finished_at
     from generate_series(1, $2::int) i
     cross join lateral (select now() - interval '1 day' * ($2::int - i) / $2::int as finished_at) t`;

/**
 * Subscribes to every queue event; resolves once one is heard (a job added and run for it, so
 * the workers have read the listener's row), with a function that unsubscribes and says how
 * many events came after that.
 */
async function listenToQueueEvents(jobs: JobQueueService, queue: QueueUnderTest): Promise<() => number> {
  let heard = 0;
  const subscription = jobs.queueEvents$.subscribe(() => (heard += 1));
  const worker = await queue.startWorker('default');
  try {
    const deadline = Date.now() + 30_000;
    while (heard === 0) {
      if (Date.now() > deadline) throw new Error('no queue event heard within 30 s of subscribing');
      await jobs.add(TASK, { index: -1 });
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    await worker.stop();
  }
  heard = 0;
  return () => {
    subscription.unsubscribe();
    return heard;
  };
}
