import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect } from '../support/database';
import { PrivatePostgres } from '../support/private-postgres';
import { nextEvent, waitFor } from '../support/wait';

const runs = new Map<string, number>();

@Injectable()
class RestartTasks {
  @Task('work')
  async work(_payload: unknown, ctx: JobContext) {
    runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
  }
}

describe('a PostgreSQL restart under a running worker', () => {
  let postgres: PrivatePostgres;
  let t: TestApp;

  before(async () => {
    postgres = await PrivatePostgres.start();
    // a poll interval far longer than the test: after the restart only a notification can wake the worker
    t = await createTestApp({ url: postgres.url, providers: [RestartTasks], jobQueue: { pollInterval: 600_000 } });
  });
  after(async () => {
    await t?.close();
    await postgres?.destroy();
  });

  it('loses no job and runs none twice; the worker LISTENs again and wakes on the next job', async () => {
    const before = await t.jobs.addMany(Array.from({ length: 200 }, () => ({ identifier: 'work' })));
    await waitFor('the jobs added before the restart to run', () => before.every((job) => runs.has(job.id)));

    const noticed = nextEvent(t.worker.events$, 'the worker to notice the lost LISTEN connection', (e: JobQueueEvent) => e.type === 'worker:error' && e.during === 'listen');
    await postgres.stop();
    await assert.rejects(connect(postgres.url), /ECONNREFUSED/, 'the server is down');
    await noticed;
    await postgres.start();

    // add() may meet a pool connection the restart closed: retried as a caller would
    let after: Awaited<ReturnType<typeof t.jobs.add>> | undefined;
    await waitFor('an add() to succeed after the restart', async () => {
      after = await t.jobs.add('work').catch(() => undefined);
      return after !== undefined;
    });
    await waitFor(`job ${after!.id}, added after the restart, to run`, () => runs.has(after!.id));
    assert.deepEqual([...new Set(runs.values())], [1], 'every job ran once');
    assert.equal(runs.size, before.length + 1);
  });
});
