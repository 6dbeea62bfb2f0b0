import 'reflect-metadata';
import { Module, type DynamicModule, type LoggerService, type INestApplicationContext, type Provider, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import type { Client } from 'pg';
import { DataSource } from 'typeorm';
import { JobQueueEntities, JobQueueModule, JobQueueService, JobQueueWorker, type JobQueueModuleOptions } from '../../libs/job-queue/src';
import { connect, createTestDatabase } from './database';

export interface TestAppOptions {
  url: string;
  providers?: Provider[];
  imports?: Array<Type | DynamicModule>;
  entities?: Function[];
  jobQueue?: JobQueueModuleOptions;
  /** More options for the app's TypeORM DataSource (its own migrations, say). */
  typeOrm?: {
    migrations?: Function[];
    migrationsRun?: boolean;
    migrationsTransactionMode?: 'all' | 'none' | 'each';
    extra?: Record<string, unknown>;
    /** The server's address as separate settings, with `url: undefined`, as many apps give it. */
    url?: undefined;
    host?: string;
    port?: number;
    username?: string;
    password?: string;
    database?: string;
  };
  /** Where Nest logs go (default: nowhere, or the console with TEST_LOGS set). */
  logger?: LoggerService;
  /** An HTTP app listening on a free port of 127.0.0.1 (Express), rather than an application context. */
  http?: { controllers?: Type[]; globalPrefix?: string };
}

export interface TestApp {
  app: INestApplicationContext;
  jobs: JobQueueService;
  worker: JobQueueWorker;
  dataSource: DataSource;
  /** With `http`: where it listens, e.g. http://127.0.0.1:41234 */
  url?: string;
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
    controllers: options.http?.controllers ?? [],
  })
  class TestAppModule {}

  const settings = { logger: options.logger ?? (process.env.TEST_LOGS ? undefined : false), abortOnError: false } as const;
  let app: INestApplicationContext;
  let url: string | undefined;
  if (options.http) {
    const web = await NestFactory.create(TestAppModule, settings);
    if (options.http.globalPrefix) web.setGlobalPrefix(options.http.globalPrefix);
    await web.listen(0, '127.0.0.1');
    url = (await web.getUrl()).replace('[::1]', '127.0.0.1');
    app = web;
  } else {
    app = await NestFactory.createApplicationContext(TestAppModule, settings);
  }
  return {
    app,
    url,
    jobs: app.get(JobQueueService),
    worker: app.get(JobQueueWorker),
    dataSource: app.get(DataSource),
    close: () => app.close(),
  };
}

export type TestDatabase = Awaited<ReturnType<typeof createTestDatabase>>;

/** What most test files open in `before`: a database of their own, a client on it, and a test app on it. */
export interface TestAppContext {
  db: TestDatabase;
  sql: Client;
  t: TestApp;
}

/** Opens a TestAppContext: `before(async () => ({ db, sql, t } = await openTestApp('label', { ... })))`. */
export async function openTestApp(label: string, options: Omit<TestAppOptions, 'url'> = {}): Promise<TestAppContext> {
  const db = await createTestDatabase(label);
  const sql = await connect(db.url);
  try {
    return { db, sql, t: await createTestApp({ url: db.url, ...options }) };
  } catch (error) {
    await sql.end();
    await db.drop();
    throw error;
  }
}

/** Closes what openTestApp opened (whatever of it was opened): `after(() => closeTestApp({ db, sql, t }))`. */
export async function closeTestApp({ db, sql, t }: Partial<TestAppContext>): Promise<void> {
  await sql?.end();
  await t?.close();
  await db?.drop();
}
