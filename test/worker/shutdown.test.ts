import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses } from '../support/worker-processes';

const started = new Set<string>();
const finished = new Set<string>();
/** Lets the `short` job finish: the test calls it once shutdown has begun. */
let finishShort: () => void = () => undefined;

@Injectable()
class SlowTasks {
  /** Finishes during the grace period: when the test says shutdown has begun. */
  @Task('short')
  async short(_payload: unknown, ctx: JobContext) {
    started.add(ctx.job.id);
    await new Promise<void>((resolve) => (finishShort = resolve));
    finished.add(ctx.job.id);
  }

  /** Runs until aborted, then gives up as the signal asks. */
  @Task('polite')
  async polite(_payload: unknown, ctx: JobContext) {
    started.add(ctx.job.id);
    await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
  }

  /** Ignores the signal and finishes only when the test says (finishStubborn). */
  @Task('stubborn')
  async stubborn(_payload: unknown, ctx: JobContext) {
    started.add(ctx.job.id);
    await new Promise<void>((resolve) => (finishStubborn = resolve));
    finished.add(ctx.job.id);
  }
}

let finishStubborn: () => void = () => undefined;

describe('graceful shutdown', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('shutdown');
    sql = await connect(db.url);
    await (await createTestApp({ url: db.url, jobQueue: { worker: false } })).close(); // makes the tables
  });
  beforeEach(async () => {
    await sql.query('delete from job_queue.jobs');
    await sql.query('update job_queue.job_queues set locked_at = null, locked_by = null');
  });
  afterEach(() => stopWorkerProcesses());
  after(async () => {
    await sql.end();
    await db.drop();
  });

  it('lets short jobs finish, gives back aborted ones with their attempt returned, keeps a handler that ignores the abort locked until it settles', async () => {
    const t = await createTestApp({
      url: db.url,
      providers: [SlowTasks],
      jobQueue: { concurrency: 10, shutdownGracePeriod: 1500, heartbeatInterval: 200, workerTimeout: 2000 },
    });
    const events: JobQueueEvent[] = [];
    t.worker.events$.subscribe((e) => events.push(e));
    const jobs = await t.jobs.addMany([
      { identifier: 'short' },
      { identifier: 'polite', queueName: 'serial' },
      { identifier: 'polite', queueName: 'serial' },
      { identifier: 'stubborn', maxAttempts: 1 },
    ]);
    const [short, politeHead, politeNext, stubborn] = jobs;
    const workerId = t.worker.workerId;
    try {
      await waitFor('jobs to start', () => started.has(short.id) && started.has(politeHead.id) && started.has(stubborn.id));
    } catch (error) {
      finishStubborn();
      await t.close();
      throw error;
    }
    const closing = t.close();
    await waitFor('the worker to begin its shutdown', () => t.worker.isStopping);
    finishShort();
    // after the grace period and the abort: the stubborn handler is still running
    await waitFor('the stubborn job to be reported stuck', () =>
      events.some((e) => e.type === 'job:stuck' && e.job.id === stubborn.id && e.reason === 'shutdown'),
    );
    const jobRows = async () => (await sql.query('select id::text, attempts, locked_by, last_error from job_queue.jobs order by id')).rows;
    try {
      assert.ok(finished.has(short.id));
      assert.equal(started.has(politeNext.id), false, 'the serial queue was still busy with its head');
      assert.deepEqual(await jobRows(), [
        { id: politeHead.id, attempts: 0, locked_by: null, last_error: null },
        { id: politeNext.id, attempts: 0, locked_by: null, last_error: null },
        { id: stubborn.id, attempts: 1, locked_by: workerId, last_error: null },
      ], 'the polite head was given back with its attempt returned; the stubborn job stays locked');
      // and the worker stays alive in the cluster's eyes while it runs: its heartbeat goes on
      const heartbeat = async () => (await sql.query('select heartbeat_at from job_queue.workers where id = $1', [workerId])).rows[0]?.heartbeat_at?.getTime();
      const first = await heartbeat();
      assert.ok(first, 'the worker row is still there');
      await waitFor('another heartbeat', async () => ((await heartbeat()) ?? 0) > first);
    } finally {
      finishStubborn();
      await closing;
    }

    assert.ok(finished.has(stubborn.id));
    assert.deepEqual(await jobRows(), [
      { id: politeHead.id, attempts: 0, locked_by: null, last_error: null },
      { id: politeNext.id, attempts: 0, locked_by: null, last_error: null },
    ], 'the stubborn job, once it settled, was recorded as it ended: completed');
    assert.equal((await sql.query('select count(*)::int as n from job_queue.job_queues where locked_at is not null')).rows[0].n, 0);
    assert.equal((await sql.query('select count(*)::int as n from job_queue.workers where id = $1', [workerId])).rows[0].n, 0);
    const stop = events.find((e) => e.type === 'worker:stop');
    assert.deepEqual(stop?.type === 'worker:stop' && stop.givenBack, [politeHead.id]);
    assert.equal(events.some((e) => e.type === 'job:error' || e.type === 'job:failed'), false, 'an aborted job is not a failure');

    // the given-back job runs again in the next worker
    const next = await createTestApp({ url: db.url, providers: [SlowTasks], jobQueue: { worker: false, shutdownGracePeriod: 200 } });
    started.clear();
    void next.worker.runUntilIdle();
    try {
      await waitFor('the given-back job to run again', () => started.has(politeHead.id));
    } finally {
      await next.close(); // worker: false, but runUntilIdle() holds jobs: they are given back too
    }
    assert.equal((await sql.query('select count(*)::int as n from job_queue.jobs where locked_at is not null')).rows[0].n, 0);
  });

  it('SIGTERM drains a worker process started with enableShutdownHooks', async () => {
    await sql.query(`select job_queue.add_job('sleep', '{"ms": 300}')`);
    const [worker] = await startWorkerProcesses(1, { url: db.url });
    await worker.waitForOutput('that it started the job', /started sleep/);
    const exit = await worker.terminate();
    // Nest closes the app, then re-raises the signal so the process ends as a SIGTERM would
    assert.deepEqual(exit, { code: null, signal: 'SIGTERM' });
    assert.match(worker.output, /finished sleep/);
    assert.equal((await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n, 0);
  });
});
