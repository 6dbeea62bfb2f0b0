import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, waitFor, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';

const runs = new Map<string, number>();

@Injectable()
class FaultTasks {
  @Task('work')
  async work(_payload: unknown, ctx: JobContext) {
    runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

describe('connection faults', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp;
  const events: JobQueueEvent[] = [];

  before(async () => {
    db = await createTestDatabase('faults');
    sql = await connect(db.url);
    // a poll interval far longer than the test: only a notification can wake the worker
    t = await createTestApp({ url: db.url, providers: [FaultTasks], jobQueue: { pollInterval: 600_000 } });
    t.worker.events$.subscribe((e) => events.push(e));
  });
  after(async () => {
    await sql.end();
    await t.close();
    await db.drop();
  });

  const listenPids = async () =>
    (await sql.query(`select pid from pg_stat_activity where datname = current_database() and query ilike 'listen %' and pid <> pg_backend_pid()`)).rows.map((r) => r.pid);

  it('a killed LISTEN connection is re-established and notifications wake the worker again', async () => {
    await waitFor(async () => (await listenPids()).length === 1, 10_000, 'the LISTEN connection');
    const [before] = await listenPids();
    await sql.query('select pg_terminate_backend($1)', [before]);
    await waitFor(() => events.some((e) => e.type === 'worker:error' && e.during === 'listen'), 10_000, 'the worker to notice');
    await waitFor(async () => (await listenPids()).some((pid) => pid !== before), 10_000, 'a new LISTEN connection');
    const job = await t.jobs.add('work');
    await waitFor(() => runs.get(job.id) === 1, 10_000, 'the job to run after a notification');
  });

  it('claims and releases survive their connections being killed: no job lost or run twice', async () => {
    const jobs = await t.jobs.addMany(Array.from({ length: 600 }, () => ({ identifier: 'work' })));
    // kill every connection of the app's pool a few times while it drains
    for (let round = 0; round < 5; round++) {
      await new Promise((resolve) => setTimeout(resolve, 40));
      await sql.query(`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()`);
    }
    await waitFor(async () => (await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n === 0, 60_000, 'the queue to drain');
    for (const job of jobs) assert.equal(runs.get(job.id), 1, `job ${job.id} ran once`);
  });
});
