import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { JobQueueMaintenance, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

/**
 * The maintenance leader's VACUUM of `jobs` (maintenance/jobs-vacuum.ts), driven by hand
 * (`runOnce`, which waits for the vacuum it starts): after enough dead rows, not before, not
 * when turned off, and not (nor any error) for a role that does not own the table.
 */
describe('the vacuum of the jobs table', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  const apps: TestApp[] = [];

  before(async () => {
    db = await createTestDatabase('jobs_vacuum');
    sql = await connect(db.url);
  });
  after(async () => {
    await Promise.all(apps.map((t) => t.close()));
    await sql.end();
    await db.drop();
  });

  /** An app whose worker never claims (no tasks), with maintenance run by hand. */
  async function open(jobQueue: Record<string, unknown> = {}, url = db.url) {
    const logs: string[] = [];
    const logger = { log: (m: unknown) => logs.push(String(m)), error: () => undefined, warn: (m: unknown) => logs.push(String(m)) };
    const t = await createTestApp({ url, logger, jobQueue: { worker: false, externalTasks: '*', ...jobQueue } });
    apps.push(t);
    const errors: JobQueueEvent[] = [];
    t.worker.events$.subscribe((e) => e.type === 'worker:error' && errors.push(e));
    return { t, errors, logs, maintenance: t.app.get(JobQueueMaintenance) };
  }

  /** `count` jobs added and deleted: 2 × count dead row versions, once the statistics have them. */
  async function killRows(count: number) {
    const before = await deadRows();
    await sql.query(`insert into job_queue.jobs (task_identifier) select 'work' from generate_series(1, $1)`, [count]);
    await sql.query(`update job_queue.jobs set priority = 1`);
    await sql.query(`delete from job_queue.jobs`);
    // This session's counts reach the shared statistics when it is next idle.
    await sql.query('select pg_stat_force_next_flush()');
    await waitFor('the dead rows counted', async () => (await deadRows()) >= before + 2 * count);
  }
  const deadRows = async () => Number((await sql.query(`select pg_stat_get_dead_tuples('job_queue.jobs'::regclass) as n`)).rows[0].n);
  /** VACUUMs of jobs other than autovacuum's: ours. */
  const vacuums = async () => Number((await sql.query(`select pg_stat_get_vacuum_count('job_queue.jobs'::regclass) as n`)).rows[0].n);

  it('vacuums jobs once 10,000 rows died, and not again until as many more died', async () => {
    const { maintenance, errors } = await open();
    // Autovacuum must not take them first (or hold the table: the vacuum skips a locked one).
    await sql.query('alter table job_queue.jobs set (autovacuum_enabled = false)');
    await killRows(3_000);
    const before = await vacuums();
    await maintenance.runOnce();
    assert.equal(await vacuums(), before, '6,000 dead rows: no vacuum yet');

    await killRows(3_000);
    await maintenance.runOnce();
    assert.equal(await vacuums(), before + 1, '12,000 dead rows: one vacuum');
    assert.ok((await deadRows()) < 1_000, `the vacuum removed the dead rows (${await deadRows()} left)`);
    await maintenance.runOnce();
    assert.equal(await vacuums(), before + 1, 'nothing died since: no second vacuum');
    assert.deepEqual(errors, []);
  });

  it('does nothing with vacuumJobs: false', async () => {
    const { maintenance, t } = await open({ vacuumJobs: false });
    await apps[0].app.get(JobQueueMaintenance).stop(); // the other test's app would otherwise be the leader
    await killRows(6_000);
    const before = await vacuums();
    await maintenance.runOnce();
    assert.equal(maintenance.isLeader, true);
    assert.equal(await vacuums(), before);
    await t.close();
    apps.splice(apps.indexOf(t), 1);
  });

  it('leaves jobs to autovacuum, without an error, when its role does not own the table', async () => {
    await sql.query(`drop role if exists jq_not_owner`);
    await sql.query(`create role jq_not_owner login`);
    await sql.query(`grant usage on schema job_queue to jq_not_owner;
      grant all on all tables in schema job_queue to jq_not_owner;
      grant all on all sequences in schema job_queue to jq_not_owner;
      grant execute on all functions in schema job_queue to jq_not_owner`);
    for (const t of apps) await t.app.get(JobQueueMaintenance).stop();
    const url = new URL(db.url);
    url.username = 'jq_not_owner';
    const { maintenance, errors, logs, t } = await open({ migrationsRun: false }, url.toString());
    await killRows(6_000);
    const before = await vacuums();
    await maintenance.runOnce();
    assert.equal(maintenance.isLeader, true);
    await maintenance.runOnce();
    assert.equal(await vacuums(), before);
    assert.deepEqual(errors, []);
    // Said once, not tried again at every round.
    assert.deepEqual(logs.filter((m) => /does not own/.test(m)), [`The job queue's role does not own job_queue.jobs: its dead rows are left to autovacuum`]);
    await t.close();
    apps.splice(apps.indexOf(t), 1);
    await sql.query(`drop owned by jq_not_owner; drop role jq_not_owner`);
  });
});
