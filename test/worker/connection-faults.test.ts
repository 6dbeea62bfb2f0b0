import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { listenerPids, terminateConnections } from '../support/connections';
import { connect, createTestDatabase } from '../support/database';
import { waitFor, waitForNoJobs } from '../support/wait';

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

  it('a killed LISTEN connection is re-established and notifications wake the worker again', async () => {
    await waitFor('the LISTEN connection', async () => (await listenerPids(sql)).length === 1);
    const [before] = await listenerPids(sql);
    assert.equal(await terminateConnections(sql, 'pid = $1', [before]), 1);
    await waitFor('the worker to notice', () => events.some((e) => e.type === 'worker:error' && e.during === 'listen'));
    await waitFor('a new LISTEN connection', async () => (await listenerPids(sql)).some((pid) => pid !== before));
    const job = await t.jobs.add('work');
    await waitFor('the job to run after a notification', () => runs.get(job.id) === 1);
  });

  it('claims and releases survive their connections being killed: no job lost or run twice', async () => {
    const jobs = await t.jobs.addMany(Array.from({ length: 600 }, () => ({ identifier: 'work' })));
    // kill every connection of the app's pool five times while it drains, a hundred jobs apart
    const ranBefore = runs.size;
    for (const ran of [1, 100, 200, 300, 400]) {
      await waitFor(`${ran} jobs to run`, () => runs.size - ranBefore >= ran);
      await terminateConnections(sql);
    }
    await waitForNoJobs(sql);
    for (const job of jobs) assert.equal(runs.get(job.id), 1, `job ${job.id} ran once`);
  });
});
