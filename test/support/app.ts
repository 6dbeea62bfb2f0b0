import 'reflect-metadata';
import { Module, type DynamicModule, type LoggerService, type INestApplicationContext, type Provider, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { JobQueueEntities, JobQueueModule, JobQueueService, JobQueueWorker, type JobQueueModuleOptions } from '../../libs/job-queue/src';

export interface TestAppOptions {
  url: string;
  providers?: Provider[];
  imports?: Array<Type | DynamicModule>;
  entities?: Function[];
  jobQueue?: JobQueueModuleOptions;
  /** More options for the app's TypeORM DataSource (its own migrations, say). */
  typeOrm?: { migrations?: Function[]; migrationsRun?: boolean; migrationsTransactionMode?: 'all' | 'none' | 'each'; extra?: Record<string, unknown> };
  /** Where Nest logs go (default: nowhere, or the console with TEST_LOGS set). */
  logger?: LoggerService;
}

export interface TestApp {
  app: INestApplicationContext;
  jobs: JobQueueService;
  worker: JobQueueWorker;
  dataSource: DataSource;
  close(): Promise<void>;
}

/** A Nest application context the way a user builds one: TypeORM, then the job queue. */
export async function createTestApp(options: TestAppOptions): Promise<TestApp> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: options.url,
        entities: [...JobQueueEntities, ...(options.entities ?? [])],
        synchronize: (options.entities ?? []).length > 0,
        extra: { max: 20 },
        ...options.typeOrm,
      }),
      JobQueueModule.forRoot({ pollInterval: 500, shutdownGracePeriod: 2000, ...options.jobQueue }),
      ...(options.imports ?? []),
    ],
    providers: options.providers ?? [],
  })
  class TestAppModule {}

  const app = await NestFactory.createApplicationContext(TestAppModule, { logger: options.logger ?? (process.env.TEST_LOGS ? undefined : false), abortOnError: false });
  return {
    app,
    jobs: app.get(JobQueueService),
    worker: app.get(JobQueueWorker),
    dataSource: app.get(DataSource),
    close: () => app.close(),
  };
}
