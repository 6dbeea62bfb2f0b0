import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import type { Job, JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect } from '../support/database';
import { PrivatePostgres } from '../support/private-postgres';
import { countingTask } from '../support/tasks';
import { nextEvent, waitFor, waitForNoJobs } from '../support/wait';

// a drain that takes long enough to be cut in two
const { provider: RestartTasks, runs } = countingTask('work', { delayMs: 5 });

describe('a PostgreSQL restart under a running worker', () => {
  let postgres: PrivatePostgres;
  let t: TestApp | undefined;

  before(async () => {
    postgres = await PrivatePostgres.start();
    // a poll interval far longer than the test: jobs run only when a notification (or the
    // catch-up after LISTEN reconnects) wakes the worker, never at their add (localStart off)
    t = await createTestApp({ url: postgres.url, providers: [RestartTasks], jobQueue: { pollInterval: 600_000, localStart: false } });
  });
  after(async () => {
    await t?.close();
    await postgres?.destroy();
  });

  /** add(), retried while the pool still hands out connections the restart closed, as a caller would. */
  const addAfterRestart = async (): Promise<Job> => {
    let job: Job | undefined;
    await waitFor('an add() to succeed after the restart', async () => {
      job = await t!.jobs.add('work').catch(() => undefined);
      return job !== undefined;
    });
    return job!;
  };

  it('a restart in the middle of a drain loses no job and runs none twice', async () => {
    const jobs = await t!.jobs.addMany(Array.from({ length: 2000 }, () => ({ identifier: 'work' })));
    await waitFor('the drain to be under way', () => runs.size >= 100);
    const noticed = nextEvent(t!.worker.events$, 'the worker to notice the lost LISTEN connection', (e: JobQueueEvent) => e.type === 'worker:error' && e.during === 'listen');
    await postgres.stop();
    assert.ok(runs.size < jobs.length, `the server stopped mid-drain (${runs.size} of ${jobs.length} had run)`);
    await assert.rejects(connect(postgres.url), /ECONNREFUSED/, 'the server is down');
    await noticed;
    await postgres.start();

    const sql: Client = await connect(postgres.url);
    try {
      await waitForNoJobs(sql);
    } finally {
      await sql.end();
    }
    for (const job of jobs) assert.equal(runs.get(job.id), 1, `job ${job.id} ran once`);
  });

  it('the worker LISTENs again: a job added after the restart wakes it', async () => {
    // the first may be run by the catch-up wake that follows a reconnect; the second only by its NOTIFY
    const first = await addAfterRestart();
    await waitFor(`job ${first.id} to run`, () => runs.has(first.id));
    const second = await t!.jobs.add('work');
    await waitFor(`job ${second.id} to run, woken by its notification`, () => runs.has(second.id));
  });
});
