import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestDatabase } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const runs = new Map<string, number>();

@Injectable()
class DoomedTasks {
  /** Succeeds at once; its release is what the test makes fail. */
  @Task('doomed')
  doomed(_payload: unknown, ctx: JobContext) {
    runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
    return { done: true };
  }
}

/**
 * At shutdown a flush that keeps failing is given up after a few tries, so that a database
 * refusing releases cannot hold the shutdown for ever. Its jobs finished: they must stay
 * locked by the stopping worker (for the sweep), not be given back with their attempt
 * returned, which would run them again at once in another worker.
 */
describe('a release that still fails at shutdown', () => {
  let db: TestDatabase;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('shutdown_dropped_release');
    sql = await connect(db.url);
    await (await createTestApp({ url: db.url, jobQueue: { worker: false } })).close(); // makes the tables
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  it('leaves the finished job locked by the stopped worker, its attempt counted; no other worker runs it again', async () => {
    // Every release of a completed job inserts it into finished_jobs (completed jobs are kept by default).
    await sql.query(`
      create function public.refuse_doomed() returns trigger language plpgsql as $$
      begin raise exception 'finished_jobs refuses doomed jobs (the test)'; end $$;
      create trigger refuse_doomed before insert on job_queue.finished_jobs
        for each row when (new.task_identifier = 'doomed') execute function public.refuse_doomed()`);
    const { logger, logs } = warningsLogger();
    const t = await createTestApp({ url: db.url, providers: [DoomedTasks], logger, jobQueue: { concurrency: 1, pollInterval: 100, shutdownGracePeriod: 200 } });
    const events: JobQueueEvent[] = [];
    t.worker.events$.subscribe((event) => events.push(event));
    const workerId = t.worker.workerId;
    let job: Awaited<ReturnType<typeof t.jobs.add>> | undefined;
    try {
      job = await t.jobs.add('doomed');
      await waitFor(
        () => `the job to run and its release to fail (runs: ${runs.get(job!.id) ?? 0}, events: ${events.map((e) => e.type).join(', ')})`,
        () => runs.get(job!.id) === 1 && events.some((e) => e.type === 'worker:error' && e.during === 'release'),
      );
    } finally {
      await t.close();
    }
    const releaseErrors = events.filter((e) => e.type === 'worker:error' && e.during === 'release');
    assert.ok(releaseErrors.length >= 5, `the flush was tried (${releaseErrors.length} times) and given up`);
    const stop = events.find((e) => e.type === 'worker:stop');
    assert.deepEqual(stop?.type === 'worker:stop' && stop.givenBack, [], 'nothing given back');
    assert.ok(
      logs.some((line) => line.startsWith('error') && line.includes(`job(s) ${job!.id} stay locked by ${workerId}`)),
      `the shutdown names the job left locked:\n${logs.join('\n')}`,
    );

    const row = async () => (await sql.query('select locked_by, attempts, started_at is not null as started from job_queue.jobs where id = $1', [job.id])).rows;
    assert.deepEqual(await row(), [{ locked_by: workerId, attempts: 1, started: true }], 'still locked by the stopped worker, its attempt not returned');
    assert.equal((await sql.query('select count(*)::int as n from job_queue.finished_jobs where id = $1', [job.id])).rows[0].n, 0);

    // Another worker, with releases working again, finds nothing to run: the job waits for the sweep.
    await sql.query('drop trigger refuse_doomed on job_queue.finished_jobs');
    const next = await createTestApp({ url: db.url, providers: [DoomedTasks], jobQueue: { worker: false } });
    try {
      await next.worker.runUntilIdle();
    } finally {
      await next.close();
    }
    assert.equal(runs.get(job.id), 1, 'the finished job did not run again');
    assert.deepEqual(await row(), [{ locked_by: workerId, attempts: 1, started: true }]);
  });
});
