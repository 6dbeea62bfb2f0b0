import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import type { JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { countingTask } from '../support/tasks';
import { waitFor, waitForNoJobs } from '../support/wait';

const { provider: SchemaTasks, runs } = countingTask('work');

/**
 * A rolling deploy: a newer replica migrates the jobs table while this one runs. Every
 * statement this one has prepared on its connections must keep working.
 */
describe('schema changes under a running worker', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let t: TestApp;
  let sql: Client;
  /** Statements that failed in the worker (claims, releases, heartbeats): none may, before or after a change. */
  const errors: string[] = [];

  before(async () => {
    db = await createTestDatabase('schema_changes');
    t = await createTestApp({ url: db.url, providers: [SchemaTasks] });
    t.worker.events$.subscribe((e: JobQueueEvent) => e.type === 'worker:error' && errors.push(`${e.during}: ${(e.error as Error).message}`));
    sql = await connect(db.url);
  });
  after(async () => {
    await t.close();
    await sql.end();
    await db.drop();
  });

  /** Uses every prepared statement of the hot path and the admin calls, on every pool connection the drain touches. */
  const useEverything = async (label: string) => {
    const one = await t.jobs.add('work', { label });
    const many = await t.jobs.addMany(Array.from({ length: 50 }, (_, n) => ({ identifier: 'work', payload: { label, n } })));
    const keyed = await t.jobs.addMany([{ identifier: 'work', jobKey: `${label}-key`, payload: { label } }]);
    const later = await t.jobs.add('work', { label }, { runAt: new Date(Date.now() + 3_600_000), jobKey: `${label}-later` });
    assert.equal((await t.jobs.getJob(later.id))?.id, later.id);
    assert.deepEqual((await t.jobs.rescheduleJobs([later.id], { priority: 3 })).map((j) => j.priority), [3]);
    assert.equal((await t.jobs.removeJob(`${label}-later`))?.id, later.id);
    const jobs = [one, ...many, ...keyed];
    await waitFor(`the ${label} jobs to run`, () => jobs.every((job) => runs.has(job.id)));
    await waitForNoJobs(sql);
    for (const job of jobs) assert.equal(runs.get(job.id), 1, `job ${job.id} ran once`);
    assert.deepEqual(errors, [], 'no statement of the worker failed');
  };

  it('a column added to the jobs table (a later migration) stops nothing', async () => {
    await useEverything('before');
    await sql.query(`alter table job_queue.jobs add column added_by_a_later_version text`);
    await useEverything('after');
  });

  it('a statement whose result a schema change alters is prepared again, not failed for good', async () => {
    await useEverything('before-type-change');
    // Changing a column's type changes what every statement returns. Our migrations never do
    // (see the README), but a prepared statement must not fail forever when it happens. The
    // SQL functions (add_job and the admin calls) are out of reach: PL/pgSQL keeps the row
    // type it compiled for the life of the connection. So this uses the plain statements.
    await sql.query(`alter table job_queue.jobs alter column last_error type varchar`);
    const jobs = await t.jobs.addMany(Array.from({ length: 50 }, (_, n) => ({ identifier: 'work', payload: { n } })));
    await waitFor('the jobs added after the change to run', () => jobs.every((job) => runs.has(job.id)));
    await waitForNoJobs(sql);
    // getJob reads both tables: a completed job is found in finished_jobs
    const first = await t.jobs.getJob(jobs[0].id);
    assert.deepEqual([first?.id, first?.state, first?.attempts], [jobs[0].id, 'completed', 1]);
    assert.deepEqual(errors, [], 'no statement of the worker failed');
  });
});
