import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp } from '../support/app';
import { listenerPids } from '../support/connections';
import { connect, createTestDatabase } from '../support/database';
import { waitFor, waitForValue } from '../support/wait';
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

  /** Never settles and ignores the signal: must not block shutdown. */
  @Task('stubborn')
  async stubborn(_payload: unknown, ctx: JobContext) {
    started.add(ctx.job.id);
    await new Promise(() => {});
  }
}

let releaseFirstRun: (() => void) | undefined;
let runs = 0;

@Injectable()
class LateFinisher {
  /** The first run ignores the abort and finishes only when told; later runs wait for the abort. */
  @Task('late_finisher')
  async run(_payload: unknown, ctx: JobContext) {
    runs++;
    if (runs === 1) return new Promise<void>((resolve) => (releaseFirstRun = resolve));
    await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
    throw new Error('aborted');
  }

  /** Added after the late finisher: once it is completed, an earlier release would have been written. */
  @Task('marker')
  async marker() {}
}

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

  it('lets short jobs finish, aborts and gives back long ones with their attempt returned, leaves nothing locked', async () => {
    const t = await createTestApp({ url: db.url, providers: [SlowTasks], jobQueue: { concurrency: 10, shutdownGracePeriod: 1500 } });
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
      await t.close();
      throw error;
    }
    await waitFor('the worker\'s LISTEN connection', async () => (await listenerPids(sql)).length === 1);
    const closing = t.close();
    // stop() lets go of LISTEN first: from then on it is waiting out the grace period
    await waitFor('the worker to begin its shutdown', async () => (await listenerPids(sql)).length === 0);
    finishShort();
    await closing;

    assert.ok(finished.has(short.id));
    assert.equal(started.has(politeNext.id), false, 'the serial queue was still busy with its head');
    const rows = (await sql.query('select id::text, attempts, locked_at, locked_by, last_error from job_queue.jobs order by id')).rows;
    assert.deepEqual(rows, [
      { id: politeHead.id, attempts: 0, locked_at: null, locked_by: null, last_error: null },
      { id: politeNext.id, attempts: 0, locked_at: null, locked_by: null, last_error: null },
      { id: stubborn.id, attempts: 0, locked_at: null, locked_by: null, last_error: null },
    ]);
    assert.equal((await sql.query('select count(*)::int as n from job_queue.job_queues where locked_at is not null')).rows[0].n, 0);
    assert.equal((await sql.query('select count(*)::int as n from job_queue.workers where id = $1', [workerId])).rows[0].n, 0);
    const stop = events.find((e) => e.type === 'worker:stop');
    assert.deepEqual(stop?.type === 'worker:stop' && stop.givenBack.sort(), [politeHead.id, stubborn.id].sort());
    assert.equal(events.some((e) => e.type === 'job:error' || e.type === 'job:failed'), false, 'an aborted job is not a failure');

    // the given-back jobs run again in the next worker
    const next = await createTestApp({ url: db.url, providers: [SlowTasks], jobQueue: { worker: false, shutdownGracePeriod: 200 } });
    started.clear();
    void next.worker.runUntilIdle();
    try {
      await waitFor('given-back jobs to run again', () => started.has(politeHead.id) && started.has(stubborn.id));
    } finally {
      await next.close(); // worker: false, but runUntilIdle() holds jobs: they are given back too
    }
    assert.equal((await sql.query('select count(*)::int as n from job_queue.jobs where locked_at is not null')).rows[0].n, 0);
  });

  it('a run given back at shutdown that finishes later does not release the job its restarted worker claimed again', async () => {
    const t = await createTestApp({ url: db.url, providers: [LateFinisher], jobQueue: { shutdownGracePeriod: 100 } });
    try {
      const job = await t.jobs.add('late_finisher');
      await waitFor('the first run', () => releaseFirstRun !== undefined);
      await t.worker.stop(); // gives the job back; the first run is still going
      await t.worker.start(); // same worker id: claims the job again
      await waitFor('the second run', () => runs === 2);
      releaseFirstRun!(); // the stale run succeeds now
      // releases are written in order: once a job added after it is completed, the stale run's would be too
      const marker = await t.jobs.add('marker');
      await waitForValue(sql, 'the marker job to complete', 'select count(*)::int from job_queue.jobs where id = $1', 0, [marker.id]);
      const rows = (await sql.query('select attempts, locked_by from job_queue.jobs where id = $1', [job.id])).rows;
      assert.deepEqual(rows, [{ attempts: 1, locked_by: t.worker.workerId }], 'still held by the second run, not completed by the first');
    } finally {
      await t.close();
    }
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
