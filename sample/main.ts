/**
 * `npm start`: the sample app on an embedded PostgreSQL kept in .data/pg (or on
 * DATABASE_URL when set), on Express, or on Fastify with PLATFORM=fastify. It adds a few jobs
 * itself so that the log shows jobs being added, run, retried and serialised; then try `curl
 * -XPOST localhost:3000/users -H 'content-type: application/json' -d
 * '{"email":"you@example.com"}'`. Ctrl-C drains the worker. PORT=0 takes a free port.
 */
import 'reflect-metadata';
import { Logger, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { startDetachedEmbeddedPostgres } from '../apps/embedded-postgres';
import { JobQueueService, JobQueueWorker } from '../libs/job-queue/src';
import { AppModule } from './app.module';
import { UsersController } from './users.controller';

async function main() {
  const logger = new Logger('Sample');
  if (!process.env.DATABASE_URL) {
    const dataDir = join(__dirname, '..', '..', '.data', 'pg');
    // In a detached process: Ctrl-C stops the app (draining its worker) before the database.
    const pg = await startDetachedEmbeddedPostgres(dataDir);
    process.env.DATABASE_URL = pg.url;
    if (pg.dataDir !== dataDir) {
      // As root, PostgreSQL runs as the postgres user, which may not enter this project's folder.
      logger.warn(`The postgres user cannot reach ${dataDir}: the data is kept in ${pg.dataDir} instead`);
    }
    logger.log(`Embedded PostgreSQL running from ${pg.dataDir}`);
  }

  const platform = process.env.PLATFORM ?? 'express';
  const app = await createApp(platform);
  app.enableShutdownHooks();

  const worker = app.get(JobQueueWorker);
  worker.events$.subscribe((event) => {
    if (event.type === 'job:start') logger.log(`▶ job ${event.job.id} ${event.job.taskIdentifier} (attempt ${event.job.attempts}/${event.job.maxAttempts})`);
    if (event.type === 'job:success') logger.log(`✔ job ${event.job.id} ${event.job.taskIdentifier} in ${event.durationMs.toFixed(0)} ms`);
    if (event.type === 'job:progress') logger.log(`… job ${event.job.id} ${event.job.taskIdentifier} at ${JSON.stringify(event.progress)}%`);
    if (event.type === 'job:cancelled') logger.log(`✖ job ${event.jobId} cancelled: ${event.reason ?? 'no reason given'}`);
    // failures are logged by the worker itself, with the time of the retry
  });

  await app.listen(Number(process.env.PORT ?? 3000));
  const { port } = app.getHttpServer().address() as AddressInfo;
  logger.log(`Listening on http://localhost:${port} (${platform}) — POST /users {"email": "..."}, GET /jobs?state=completed, GET /jobs/counts, GET /jobs/:id, POST /jobs/:id/cancel`);
  logger.log(`Dashboard: http://localhost:${port}/dashboard (from this machine only) — health: http://localhost:${port}/health`);

  // A first tour, without curl: a user and their welcome email in one transaction, and a serial queue.
  const users = app.get(UsersController);
  const { user, jobId } = await users.createUser({ email: `newcomer-${Date.now()}@example.com` });
  logger.log(`Created user ${user.id} and welcome-email job ${jobId} in one transaction`);
  const invoices = await app.get(JobQueueService).addMany([1, 2, 3].map((invoice) => ({ identifier: 'charge_invoice', payload: { invoice } })));
  logger.log(`Queued invoices as jobs ${invoices.map((j) => j.id).join(', ')} in the serial queue "billing"`);

  // A result, waited for: waitForJob() resolves once a worker (any replica) completes the job.
  const jobs = app.get(JobQueueService);
  const pdf = await jobs.add('render_invoice_pdf', { invoice: 1 });
  void jobs.waitForJob(pdf.id, { timeout: '30s' }).then(
    (done) => logger.log(`Job ${done.id} returned ${JSON.stringify(done.result)}`),
    (error: unknown) => logger.warn(`Job ${pdf.id}: ${String(error)}`),
  );

  // A flow: three PDFs rendered in parallel, then zipped, the zip starting only once all three completed.
  const flow = await jobs.addFlow([
    ...[1, 2, 3].map((invoice) => ({ ref: `pdf${invoice}`, identifier: 'render_invoice_pdf', payload: { invoice } })),
    { ref: 'zip', identifier: 'zip_invoices', dependsOn: ['pdf1', 'pdf2', 'pdf3'] },
  ]);
  void jobs.waitForFlow(flow.flowId, { timeout: '30s' }).then(
    (results) => logger.log(`Flow ${flow.flowId} completed: ${JSON.stringify(results.zip)}`),
    (error: unknown) => logger.warn(`Flow ${flow.flowId}: ${String(error)}`),
  );

  // A long job that reports progress, cancelled while it runs: its handler's signal aborts, and it ends cancelled.
  const exportJob = await jobs.add('export_orders', { batches: 10 });
  setTimeout(() => {
    jobs.cancelJob(exportJob.id, 'the sample cancels it after 2 s').then(
      (job) => logger.log(`Cancel of job ${job.id} requested while it was ${job.state}`),
      (error: unknown) => logger.warn(`Could not cancel job ${exportJob.id}: ${String(error)}`),
    );
  }, 2_000);

  if (process.env.SAMPLE_EXIT_AFTER_MS) {
    setTimeout(() => void app.close(), Number(process.env.SAMPLE_EXIT_AFTER_MS));
  }
}

/**
 * The app on Express, or on Fastify (loaded only then). On Fastify, Nest's own urlencoded
 * parser (bodyParser, on by default) reads the dashboard's forms; an app that turns it off
 * registers @fastify/formbody instead (docs/guides/dashboard.md).
 */
async function createApp(platform: string): Promise<INestApplication> {
  if (platform === 'fastify') {
    const { FastifyAdapter } = await import('@nestjs/platform-fastify');
    return NestFactory.create<NestFastifyApplication>(AppModule, new FastifyAdapter());
  }
  if (platform !== 'express') throw new Error(`PLATFORM must be express or fastify, got ${JSON.stringify(platform)}`);
  return NestFactory.create(AppModule);
}

main().catch((error: unknown) => {
  new Logger('Sample').error(error instanceof Error ? error.message : String(error), error instanceof Error ? error.stack : undefined);
  process.exit(1);
});
