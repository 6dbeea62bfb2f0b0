/**
 * A chaos run's producer process: a Nest app with no worker (`worker: false`) that adds jobs
 * inside TypeORM transactions, each with its ledger row (`chaos.produced`) in the same
 * transaction, so the ledger holds exactly what committed. About a fifth of the transactions
 * are rolled back on purpose (then recorded in `chaos.rolled_back`). Loops (all seeded by SEED):
 * three that add plain, queued, slow, cancellable, limited jobs and flows (a diamond, a chain);
 * one that adds keyed jobs (mode `replace`) one at a time, so that versions commit in order;
 * one that cancels cancellable jobs. SIGTERM stops the loops, then the app. A failed
 * transaction (a fault) is counted and the loop goes on; its outcome is whatever committed.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { processTypeOrm } from '../support/process-typeorm';
import { DataSource, type EntityManager } from 'typeorm';
import { isJobQueueError, JobQueueModule, JobQueueService, type FlowStep } from '../../libs/job-queue/src';
import { Random } from './random';
import { KINDS, MAX_ATTEMPTS as maxAttempts, SLOW_MAX_ATTEMPTS, taskOf, type Kind } from './ledger';

const QUEUES = ['chaos-q1', 'chaos-q2', 'chaos-q3', 'chaos-q4'];
const JOB_KEYS = ['chaos-k1', 'chaos-k2', 'chaos-k3'];

class RollBack extends Error {}

let stopping = false;
const stats = { committed: 0, rolledBack: 0, failed: 0, cancels: 0, errors: {} as Record<string, number> };

/** Counts a failed transaction or cancel by its error's code (a pg or JQ_* code, or the message's start). */
function failed(error: unknown): void {
  stats.failed += 1;
  const e = error as { code?: string; message?: string };
  const what = e.code ?? String(e.message).slice(0, 60);
  stats.errors[what] = (stats.errors[what] ?? 0) + 1;
}

@Module({
  imports: [
    processTypeOrm(process.env.APP_NAME!),
    JobQueueModule.forRoot({ worker: false, migrationsRun: false, externalTasks: [...KINDS.map(taskOf)] }),
  ],
})
class ChaosProducerModule {}

interface Produced {
  key: string;
  kind: Kind;
  jobId: string;
  queueName?: string;
  jobKey?: string;
  version?: number;
  after?: string[];
  expect: string;
}

async function record(manager: EntityManager, rows: Produced[]): Promise<void> {
  for (const r of rows) {
    await manager.query('insert into chaos.produced (key, kind, job_id, queue_name, job_key, version, after, expect) values ($1, $2, $3, $4, $5, $6, $7, $8)', [
      r.key, r.kind, r.jobId, r.queueName ?? null, r.jobKey ?? null, r.version ?? null, r.after ?? [], r.expect,
    ]);
  }
}

/** One transaction of adds, rolled back on purpose when `rollBack`. */
async function transaction(dataSource: DataSource, rollBack: boolean, add: (manager: EntityManager) => Promise<Produced[]>): Promise<void> {
  let added: Produced[] = [];
  try {
    await dataSource.transaction(async (manager) => {
      added = await add(manager);
      await record(manager, added);
      if (rollBack) throw new RollBack();
    });
    stats.committed += added.length;
  } catch (error) {
    if (!(error instanceof RollBack)) {
      failed(error);
      await pause(100);
      return;
    }
    stats.rolledBack += added.length;
    for (const r of added) await dataSource.query('insert into chaos.rolled_back (key, kind) values ($1, $2)', [r.key, r.kind]).catch(() => undefined);
  }
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function mixedLoop(name: string, random: Random, dataSource: DataSource, queue: JobQueueService): Promise<void> {
  for (let n = 0; !stopping; n++) {
    const key = `${name}-${n}`;
    const kind = random.weighted({ plain: 35, queued: 20, slow: 4, cancellable: 10, limited: 15, diamond: 4, chain: 4 });
    const rollBack = random.chance(0.2);
    // a tenth are long, so that a frozen worker's stale run can still be going when its job runs again elsewhere
    const ms = random.chance(0.1) ? random.int(500, 2500) : random.int(0, 40);
    await transaction(dataSource, rollBack, async (manager) => {
      switch (kind) {
        case 'plain': {
          const forever = random.chance(0.1);
          const job = await queue.add(taskOf('plain') as never, { key, ms, fail: random.int(0, 2), forever } as never, { manager, maxAttempts });
          return [{ key, kind, jobId: job.id, expect: forever ? 'failed' : 'completed' }];
        }
        case 'queued': {
          const queueName = random.pick(QUEUES);
          const job = await queue.add(taskOf('queued') as never, { key, ms, fail: random.chance(0.2) ? 1 : 0 } as never, { manager, queueName, maxAttempts });
          return [{ key, kind, jobId: job.id, queueName, expect: 'completed' }];
        }
        case 'slow': {
          const job = await queue.add(taskOf('slow') as never, { key, ms: 2000 } as never, { manager, maxAttempts: SLOW_MAX_ATTEMPTS });
          return [{ key, kind, jobId: job.id, expect: 'failed' }];
        }
        case 'cancellable': {
          const job = await queue.add(taskOf('cancellable') as never, { key, ms: random.int(200, 1500) } as never, { manager, maxAttempts });
          return [{ key, kind, jobId: job.id, expect: 'completed-or-cancelled' }];
        }
        case 'limited': {
          const job = await queue.add(taskOf('limited') as never, { key, ms: random.int(20, 120) } as never, { manager, maxAttempts });
          return [{ key, kind, jobId: job.id, expect: 'completed' }];
        }
        default:
          return addFlow(queue, manager, key, kind, ms);
      }
    });
    // about 50 adds a second from the three loops: the workers' 24 slots kept about two-thirds busy, so the backlog stays bounded
    await pause(random.int(20, 80));
  }
}

/** A diamond (a → b, c → d) or a chain (a → b → c) of chaos.step jobs. */
async function addFlow(queue: JobQueueService, manager: EntityManager, key: string, shape: 'diamond' | 'chain', ms: number): Promise<Produced[]> {
  const edges: Record<string, string[]> = shape === 'diamond' ? { a: [], b: ['a'], c: ['a'], d: ['b', 'c'] } : { a: [], b: ['a'], c: ['b'] };
  const steps: FlowStep[] = Object.entries(edges).map(([ref, dependsOn]) => ({ ref, identifier: taskOf('step'), payload: { key: `${key}:${ref}`, ms }, dependsOn, maxAttempts }));
  const flow = await queue.addFlow(steps, { manager });
  return Object.entries(edges).map(([ref, dependsOn]) => ({
    key: `${key}:${ref}`,
    kind: 'step' as const,
    jobId: flow.jobs[ref].id,
    after: dependsOn.map((dep) => `${key}:${dep}`),
    expect: 'completed',
  }));
}

/** Keyed adds, one at a time: each version of a key commits after the one before. */
async function keyedLoop(random: Random, dataSource: DataSource, queue: JobQueueService): Promise<void> {
  for (let version = 1; !stopping; version++) {
    const jobKey = random.pick(JOB_KEYS);
    const key = `keyed-${version}`;
    await transaction(dataSource, random.chance(0.2), async (manager) => {
      const job = await queue.add(taskOf('keyed') as never, { key, ms: random.int(0, 30) } as never, { manager, jobKey, jobKeyMode: 'replace', maxAttempts });
      return [{ key, kind: 'keyed', jobId: job.id, jobKey, version, expect: 'completed-or-replaced' }];
    });
    await pause(random.int(10, 60));
  }
}

/** Cancels a recent cancellable job now and then, from this process (its workers run elsewhere). */
async function cancelLoop(random: Random, dataSource: DataSource, queue: JobQueueService): Promise<void> {
  while (!stopping) {
    await pause(random.int(100, 400));
    try {
      const [row] = await dataSource.query(`select job_id::text as id from chaos.produced where kind = 'cancellable' order by at desc offset $1 limit 1`, [random.int(0, 5)]);
      if (!row) continue;
      try {
        await queue.cancelJob(row.id, 'chaos');
        await dataSource.query('insert into chaos.cancels (job_id, accepted) values ($1, true)', [row.id]);
        stats.cancels += 1;
      } catch (error) {
        if (!isJobQueueError(error)) throw error;
        await dataSource.query('insert into chaos.cancels (job_id, accepted, code) values ($1, false, $2)', [row.id, error.code]);
      }
    } catch (error) {
      failed(error);
    }
  }
}

async function main() {
  const app = await NestFactory.createApplicationContext(ChaosProducerModule, { logger: ['error', 'warn'] });
  const dataSource = app.get(DataSource);
  const queue = app.get(JobQueueService);
  const seed = Number(process.env.SEED ?? 1);
  const loops = [
    ...[1, 2, 3].map((n) => mixedLoop(`p${n}`, new Random(seed * 31 + n), dataSource, queue)),
    keyedLoop(new Random(seed * 31 + 7), dataSource, queue),
    cancelLoop(new Random(seed * 31 + 11), dataSource, queue),
  ];
  process.once('SIGTERM', () => (stopping = true));
  console.log('ready producer');
  await Promise.all(loops);
  console.log(`stats ${JSON.stringify(stats)}`);
  await app.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
