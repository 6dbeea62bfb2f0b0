import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { LoggerService } from '@nestjs/common';
import type { Client } from 'pg';
import { JobQueueDatabase } from '../../libs/job-queue/src/db/job-queue-database';
import { writeReleases } from '../../libs/job-queue/src/worker/release-parameters';
import { closeTestApp, createTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { emptyBatch, insertHeldJobs } from '../support/held-jobs';
import { waitFor } from '../support/wait';

/**
 * The NOTIFY an add or a release sends after its commit (sql/notify-after.ts) can fail on its
 * own: the server's notification queue full, the connection lost. The add and the release have
 * committed by then, so they must succeed: a caller told that its add failed would add the job a
 * second time, and a release written again finds its jobs gone and loses the cancels it reported.
 * The failure is caused in the server, with the error PostgreSQL raises when its notification
 * queue is full: the app's connections have a search_path that finds a `pg_notify` of ours
 * before pg_catalog's, one that raises it (filling the real queue takes gigabytes). What must
 * hold: the call resolves, its rows are there once, the failure is logged, and the pool goes on
 * working.
 */
describe('a NOTIFY after the commit that fails', () => {
  let db: TestDatabase;
  let sql: Client;
  let owner: TestApp;
  let t: TestApp;
  let database: JobQueueDatabase;
  const warnings: string[] = [];
  const logger: LoggerService = { log: () => undefined, error: () => undefined, warn: (message: unknown) => void warnings.push(String(message)) };

  before(async () => {
    ({ db, sql, t: owner } = await openTestApp('notify_after_failure', { jobQueue: { worker: false, externalTasks: '*' } }));
    await sql.query(`
      create schema queue_full;
      create function queue_full.pg_notify(channel text, payload text) returns void language plpgsql as $$
      begin
        raise exception 'too many notifications in the NOTIFY queue' using errcode = '54000';
      end $$`);
    const url = new URL(db.url);
    url.searchParams.set('options', '-c search_path=queue_full,pg_catalog,public');
    t = await createTestApp({ url: url.toString(), logger, jobQueue: { worker: false, externalTasks: '*', migrationsRun: false } });
    database = t.app.get(JobQueueDatabase);
    await sql.query(`insert into job_queue.workers (id) values ('no-notify-worker')`);
  });
  after(async () => {
    await t?.close();
    await closeTestApp({ db, sql, t: owner });
  });

  it('an add without a manager resolves with its job, added once, and the failure is logged', async () => {
    const job = await t.jobs.add('work' as never, { n: 1 } as never);
    assert.equal(job.state, 'waiting');
    await waitFor('the failed NOTIFY logged', () => warnings.some((w) => w.includes('a NOTIFY after a commit failed')));
    assert.match(warnings.find((w) => w.includes('a NOTIFY after a commit failed'))!, /too many notifications in the NOTIFY queue/);
    const { rows } = await sql.query<{ id: string }>(`select id from job_queue.jobs where payload ->> 'n' = '1'`);
    assert.deepEqual(rows.map((row) => row.id), [job.id]);
    // the failed connection was destroyed, not given back in a transaction: the next adds work
    const more = await Promise.all(Array.from({ length: 5 }, (_, n) => t.jobs.add('work' as never, { n: 10 + n } as never)));
    const many = await t.jobs.addMany([20, 21].map((n) => ({ identifier: 'work', payload: { n } })) as never[]);
    assert.equal((await sql.query(`select 1 from job_queue.jobs where id = any($1::bigint[])`, [[...more, ...many].map((added) => added.id)])).rowCount, 7);
    assert.equal(warnings.filter((w) => w.includes('a NOTIFY after a commit failed')).length, 7, 'each of the 6 adds and the addMany logged its failed NOTIFY');
  });

  it('a release resolves with what it wrote, its jobs finished once, and the failure is logged', async () => {
    warnings.length = 0;
    const [done, failed] = await insertHeldJobs(sql, 'no-notify-worker', 2);
    const write = writeReleases(database, 'no-notify-worker', true, () => null);
    await write({
      ...emptyBatch(),
      completed: [{ id: done.id, claim: done.claim, result: null }],
      failed: [{ id: failed.id, claim: failed.claim, error: 'boom', code: null, delayMs: 60_000 }],
    });
    await waitFor('the failed NOTIFY logged', () => warnings.some((w) => w.includes('a NOTIFY after a commit failed')));
    const { rows } = await sql.query<{ id: string; state: string }>(
      `select id, state from job_queue.finished_jobs where id = $1 union all select id, case when locked_by is null then 'retrying' end from job_queue.jobs where id = $2`,
      [done.id, failed.id],
    );
    assert.deepEqual(rows, [
      { id: done.id, state: 'completed' },
      { id: failed.id, state: 'retrying' },
    ]);
  });
});
