/**
 * A chaos run's worker process (started by process-slot.ts): a Nest app whose tasks record every
 * attempt in the ledger (ledger.ts). Each handler records its start, sleeps as its payload says
 * (honouring its signal), and records its end: `ok`, `threw` (a failure on purpose) or `aborted`.
 * Transactional tasks (`queued`, `cancellable`) write their effect through ctx.manager, so it
 * commits with the job's completion or not at all. Prints `ready <workerId>` once started.
 * Environment: DATABASE_URL (maybe a LossyProxy's), APP_NAME (the connections' application_name).
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, CronExpression } from '@nestjs/schedule';
import { processTypeOrm } from '../support/process-typeorm';
import { DataSource, type EntityManager } from 'typeorm';
import { JobQueueModule, JobQueueWorker, Task, type CronPayload, type JobContext, type TransactionalJobContext } from '../../libs/job-queue/src';
import { HEARTBEAT_MS, LIMIT, MAX_ATTEMPTS, SLOW_MAX_ATTEMPTS, SLOW_TIMEOUT_MS, WORKER_TIMEOUT_MS, type Kind } from './ledger';

interface Work {
  key: string;
  /** How long the handler works. */
  ms?: number;
  /** Attempts that fail on purpose before one succeeds. */
  fail?: number;
  /** Every attempt fails: the job fails for good. */
  forever?: boolean;
}

const retryDelay = () => 20;

@Injectable()
class ChaosTasks {
  constructor(private readonly dataSource: DataSource) {}

  @Task('chaos.plain', { maxAttempts: MAX_ATTEMPTS, retryDelay })
  plain(work: Work, ctx: JobContext) {
    return this.attempt('plain', work, ctx);
  }

  @Task('chaos.queued', { maxAttempts: MAX_ATTEMPTS, retryDelay, transaction: true })
  queued(work: Work, ctx: TransactionalJobContext) {
    return this.attempt('queued', work, ctx, ctx.manager);
  }

  @Task('chaos.keyed', { maxAttempts: MAX_ATTEMPTS, retryDelay })
  keyed(work: Work, ctx: JobContext) {
    return this.attempt('keyed', work, ctx);
  }

  /** Always slower than its timeout: fails for good with JQ_JOB_TIMEOUT. */
  @Task('chaos.slow', { maxAttempts: SLOW_MAX_ATTEMPTS, retryDelay, timeout: SLOW_TIMEOUT_MS })
  slow(work: Work, ctx: JobContext) {
    return this.attempt('slow', work, ctx);
  }

  @Task('chaos.cancellable', { maxAttempts: MAX_ATTEMPTS, retryDelay, transaction: true })
  cancellable(work: Work, ctx: TransactionalJobContext) {
    return this.attempt('cancellable', work, ctx, ctx.manager);
  }

  @Task('chaos.step', { maxAttempts: MAX_ATTEMPTS, retryDelay })
  step(work: Work, ctx: JobContext) {
    return this.attempt('step', work, ctx);
  }

  @Task('chaos.limited', { maxAttempts: MAX_ATTEMPTS, retryDelay, globalConcurrency: LIMIT })
  limited(work: Work, ctx: JobContext) {
    return this.attempt('limited', work, ctx);
  }

  @Task('chaos.tick', { maxAttempts: MAX_ATTEMPTS, retryDelay, backfillPeriod: '1m' })
  @Cron(CronExpression.EVERY_SECOND)
  tick(payload: CronPayload, ctx: JobContext) {
    return this.attempt('tick', { key: `tick:${new Date(payload._cron.ts).toISOString()}` }, ctx);
  }

  private async attempt(kind: Kind, work: Work, ctx: JobContext, manager?: EntityManager) {
    const [{ id }] = await this.dataSource.query(
      'insert into chaos.attempts (key, kind, job_id, queue_name, attempt, pid, planned_ms) values ($1, $2, $3, $4, $5, $6, $7) returning id',
      [work.key, kind, ctx.job.id, ctx.job.queueName, ctx.job.attempts, process.pid, work.ms ?? 0],
    );
    const end = (outcome: string) => this.dataSource.query('update chaos.attempts set ended_at = clock_timestamp(), outcome = $2 where id = $1', [id, outcome]);
    try {
      await sleep(work.ms ?? 0, ctx.signal);
    } catch (reason) {
      await end(`aborted ${(reason as { code?: string })?.code ?? ''}`.trim());
      throw reason;
    }
    if (work.forever || ctx.job.attempts <= (work.fail ?? 0)) {
      await end('threw');
      throw new Error(`attempt ${ctx.job.attempts} fails on purpose`);
    }
    if (manager) await manager.query('insert into chaos.effects (attempt_id, key, job_id) values ($1, $2, $3)', [id, work.key, ctx.job.id]);
    await end('ok');
    return { pid: process.pid };
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(timer), reject(signal.reason)), { once: true });
  });
}

@Module({
  imports: [
    // a pool of 20: a transactional handler holds its transaction's connection and takes a second for its ledger rows (2 × 8 + the queue's 3)
    processTypeOrm(process.env.APP_NAME!),
    JobQueueModule.forRoot({
      concurrency: 8,
      pollInterval: 200,
      heartbeatInterval: HEARTBEAT_MS,
      workerTimeout: WORKER_TIMEOUT_MS,
      shutdownGracePeriod: 1000,
    }),
  ],
  providers: [ChaosTasks],
})
class ChaosWorkerModule {}

async function main() {
  const app = await NestFactory.createApplicationContext(ChaosWorkerModule, { logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  const worker = app.get(JobQueueWorker);
  const dataSource = app.get(DataSource);
  // fences and rescues, for the checker to tell what made a job run twice (printed too, should the insert fail)
  worker.events$.subscribe((event) => {
    if (event.type !== 'worker:fenced' && event.type !== 'job:rescued') return;
    const [jobId, dead] = event.type === 'job:rescued' ? [event.jobId, event.deadWorkerId] : [null, null];
    console.log(`event ${event.type} ${jobId ?? ''} ${dead ?? ''} at ${new Date().toISOString()}`);
    dataSource
      .query('insert into chaos.worker_events (pid, type, job_id, dead_worker) values ($1, $2, $3, $4)', [process.pid, event.type, jobId, dead])
      .catch(() => undefined);
  });
  console.log(`ready ${worker.workerId}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
