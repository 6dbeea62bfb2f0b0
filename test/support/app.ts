import 'reflect-metadata';
import { Module, type DynamicModule, type INestApplication, type INestApplicationContext, type LoggerService, type NestApplicationOptions, type Provider, type Type } from '@nestjs/common';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
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
  /** An HTTP app listening on a free port of 127.0.0.1, rather than an application context. */
  http?: HttpAppOptions;
}

/** The HTTP platforms the dashboard runs on; its tests run on each. */
export const PLATFORMS = ['express', 'fastify'] as const;
export type Platform = (typeof PLATFORMS)[number];

export interface HttpAppOptions {
  controllers?: Type[];
  globalPrefix?: string;
  /** Default express. */
  platform?: Platform;
  /** The proxies the app trusts (Express's `trust proxy`, Fastify's `trustProxy`), e.g. 'loopback'; none by default. */
  trustProxy?: string;
  /**
   * Who parses urlencoded forms on Fastify: Nest's own parser (`bodyParser`, on by default) or
   * `@fastify/formbody` with Nest's turned off (the two together fail at startup). Default formbody.
   */
  forms?: 'nest' | 'formbody';
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
    const web = await createHttpApp(TestAppModule, settings, options.http);
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

/** A Nest HTTP app on Express or on Fastify (loaded only for Fastify), trusting the proxies it is told to. */
async function createHttpApp(module: Type, settings: NestApplicationOptions, http: HttpAppOptions): Promise<INestApplication> {
  if (http.platform === 'fastify') {
    const { FastifyAdapter } = await import('@nestjs/platform-fastify');
    const adapter = new FastifyAdapter(http.trustProxy ? { trustProxy: http.trustProxy } : {});
    const forms = http.forms ?? 'formbody';
    const web = await NestFactory.create<NestFastifyApplication>(module, adapter, { ...settings, bodyParser: forms === 'nest' });
    if (forms === 'formbody') await web.register((await import('@fastify/formbody')).default);
    return web;
  }
  const web = await NestFactory.create<NestExpressApplication>(module, settings);
  if (http.trustProxy) web.set('trust proxy', http.trustProxy);
  return web;
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
