import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { jobsChannel } from '../../libs/job-queue/src/sql/identifier';
import { maxHeld } from '../../libs/job-queue/src/worker/prefetch';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect } from '../support/database';
import { waitFor } from '../support/wait';

const runs = new Map<string, number>();

@Injectable()
class QuickTasks {
  @Task('quick')
  quick(_payload: unknown, ctx: JobContext) {
    runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
  }
}

const CONCURRENCY = 2;
const POLL_MS = 100;

/**
 * A worker whose releases cannot be written stops claiming once it holds maxHeld jobs
 * (running, prefetched and finished-but-unwritten), leaving the rest in the table, and
 * goes on once its releases are written again: every job runs exactly once.
 */
describe('backpressure from unwritten releases', () => {
  let db: TestDatabase;
  let sql: Client;
  let blocker: Client;
  let t: TestApp;

  before(async () => {
    ({ db, sql, t } = await openTestApp('backpressure', { providers: [QuickTasks], jobQueue: { concurrency: CONCURRENCY, pollInterval: POLL_MS } }));
    blocker = await connect(db.url);
  });
  after(async () => {
    await blocker.query('rollback').catch(() => undefined);
    await blocker.end();
    await closeTestApp({ db, sql, t });
  });

  it('holds at most maxHeld jobs while its releases are blocked, then runs the rest, each once', async () => {
    const cap = maxHeld(CONCURRENCY);
    const total = cap * 3;
    // Every release inserts into finished_jobs (completed jobs are kept): a SHARE lock blocks them all.
    await blocker.query('begin');
    await blocker.query('lock table job_queue.finished_jobs in share mode');
    await t.jobs.addMany(Array.from({ length: total }, (_, i) => ({ identifier: 'quick', payload: { i } })));

    await waitFor(() => `the worker to run ${cap} jobs (ran ${runs.size})`, () => runs.size >= cap);
    // Nothing more for a while, however often it is woken: ten polls and as many notifications.
    for (let i = 0; i < 10; i++) {
      await sql.query('select pg_notify($1, $2)', [jobsChannel('job_queue'), '']);
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
    assert.equal(runs.size, cap, 'handlers run while releases were blocked');
    const { rows } = await sql.query(
      `select count(*) filter (where locked_by is not null)::int as held, count(*) filter (where is_available)::int as available from job_queue.jobs`,
    );
    assert.deepEqual(rows[0], { held: cap, available: total - cap });

    await blocker.query('rollback');
    await waitFor(
      () => `every job completed (ran ${runs.size} of ${total})`,
      async () => (await sql.query(`select count(*)::int as n from job_queue.finished_jobs where state = 'completed'`)).rows[0].n === total,
    );
    assert.equal((await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n, 0);
    assert.equal(runs.size, total);
    assert.deepEqual([...new Set(runs.values())], [1], 'each job ran once');
  });
});
