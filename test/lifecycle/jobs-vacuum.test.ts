import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { JobQueueMaintenance, type JobQueueEvent } from '../../libs/job-queue/src';
import { VACUUM_APPLICATION_NAME } from '../../libs/job-queue/src/maintenance/jobs-vacuum';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { PrivatePostgres } from '../support/private-postgres';
import { waitFor } from '../support/wait';

/** `count` jobs added and deleted: 2 × count dead row versions, once the statistics have them. */
async function killRowsOn(sql: Client, count: number) {
  const before = await deadRowsOn(sql);
  await sql.query(`insert into job_queue.jobs (task_identifier) select 'work' from generate_series(1, $1)`, [count]);
  await sql.query(`update job_queue.jobs set priority = 1`);
  await sql.query(`delete from job_queue.jobs`);
  // This session's counts reach the shared statistics when it is next idle.
  await sql.query('select pg_stat_force_next_flush()');
  await waitFor('the dead rows counted', async () => (await deadRowsOn(sql)) >= before + 2 * count);
}
const deadRowsOn = async (sql: Client) => Number((await sql.query(`select pg_stat_get_dead_tuples('job_queue.jobs'::regclass) as n`)).rows[0].n);
/** VACUUMs of jobs other than autovacuum's: ours. */
const vacuumsOn = async (sql: Client) => Number((await sql.query(`select pg_stat_get_vacuum_count('job_queue.jobs'::regclass) as n`)).rows[0].n);

/** An app whose worker never claims (no tasks), with maintenance run by hand; its errors and logs. */
async function openApp(options: Parameters<typeof createTestApp>[0]) {
  const logs: string[] = [];
  const logger = { log: (m: unknown) => logs.push(String(m)), error: () => undefined, warn: (m: unknown) => logs.push(String(m)) };
  const t = await createTestApp({ logger, ...options, jobQueue: { worker: false, externalTasks: '*', ...options.jobQueue } });
  const errors: JobQueueEvent[] = [];
  t.worker.events$.subscribe((e) => e.type === 'worker:error' && errors.push(e));
  return { t, errors, logs, maintenance: t.app.get(JobQueueMaintenance) };
}

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
    const opened = await openApp({ url, jobQueue });
    apps.push(opened.t);
    return opened;
  }

  const killRows = (count: number) => killRowsOn(sql, count);
  const deadRows = () => deadRowsOn(sql);
  const vacuums = () => vacuumsOn(sql);

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
    await sql.query(`create role jq_not_owner login password 'not_owner'`);
    await sql.query(`grant usage on schema job_queue to jq_not_owner;
      grant select, insert, update, delete on all tables in schema job_queue to jq_not_owner;
      grant all on all sequences in schema job_queue to jq_not_owner;
      grant execute on all functions in schema job_queue to jq_not_owner`);
    for (const t of apps) await t.app.get(JobQueueMaintenance).stop();
    const url = new URL(db.url);
    url.username = 'jq_not_owner';
    url.password = 'not_owner'; // a server that asks for one: the embedded one of `npm test`
    const { maintenance, errors, logs, t } = await open({ migrationsRun: false }, url.toString());
    await killRows(6_000);
    const before = await vacuums();
    await maintenance.runOnce();
    assert.equal(maintenance.isLeader, true);
    await maintenance.runOnce();
    assert.equal(await vacuums(), before);
    assert.deepEqual(errors, []);
    // Said once, not tried again at every round.
    assert.deepEqual(logs.filter((m) => /may not VACUUM/.test(m)), [`The job queue's role may not VACUUM job_queue.jobs (it needs to own it, or MAINTAIN on PostgreSQL 17+): its dead rows are left to autovacuum`]);
    await t.close();
    apps.splice(apps.indexOf(t), 1);
    await sql.query(`drop owned by jq_not_owner; drop role jq_not_owner`);
  });

  it('stop() during a vacuum returns without waiting for it, and reports no error', async () => {
    for (const t of apps) await t.app.get(JobQueueMaintenance).stop();
    // A slow vacuum: new connections to this database (the vacuum's) sleep after every page.
    await sql.query(`alter database "${db.name}" set vacuum_cost_delay = '100ms'`);
    await sql.query(`alter database "${db.name}" set vacuum_cost_limit = 1`);
    try {
      const { maintenance, errors, t } = await open();
      await killRows(6_000);
      maintenance.start();
      const running = async () =>
        (await sql.query(`select 1 from pg_stat_activity where application_name = $1 and state = 'active' and query ilike 'vacuum%'`, [VACUUM_APPLICATION_NAME])).rowCount === 1;
      await waitFor('the vacuum to run', running);
      await maintenance.stop();
      assert.equal(await running(), true, 'stop() did not wait for the vacuum: the server still runs it');
      assert.deepEqual(errors, []);
      await t.close();
      apps.splice(apps.indexOf(t), 1);
    } finally {
      await sql.query(`alter database "${db.name}" reset vacuum_cost_delay`);
      await sql.query(`alter database "${db.name}" reset vacuum_cost_limit`);
      // The next test's vacuum must not find the table locked by this one (it would skip it).
      const left = async () => (await sql.query(`select pg_cancel_backend(pid) from pg_stat_activity where application_name = $1`, [VACUUM_APPLICATION_NAME])).rowCount;
      await waitFor('the slow vacuum cancelled', async () => (await left()) === 0);
    }
  });

  it("stop() while the vacuum's connection is being opened returns (pg never settles a connect ended midway)", async () => {
    const { maintenance, errors, t } = await open();
    await killRows(6_000);
    const vacuum = (maintenance as unknown as { vacuum: { startIfDue(): Promise<void>; stop(): Promise<void> } }).vacuum;
    await vacuum.startIfDue(); // the vacuum's client is connecting now
    let timer: NodeJS.Timeout | undefined;
    const hung = new Promise<string>((resolve) => (timer = setTimeout(() => resolve('hung'), 10_000)));
    assert.equal(await Promise.race([vacuum.stop().then(() => 'stopped'), hung]), 'stopped', 'stop() returned (a hang here hung the app\'s shutdown)');
    clearTimeout(timer);
    assert.deepEqual(errors, []);
    await t.close();
    apps.splice(apps.indexOf(t), 1);
  });

  it('vacuums again once 10,000 rows died after autovacuum removed what a long transaction had kept', async () => {
    for (const t of apps) await t.app.get(JobQueueMaintenance).stop();
    const { maintenance, errors, t } = await open();
    // A transaction whose snapshot holds the xmin horizon: no vacuum can remove what dies after it.
    const holder = await connect(db.url);
    await holder.query('begin isolation level repeatable read');
    await holder.query('select 1');
    await killRows(6_000);
    let before = await vacuums();
    await maintenance.runOnce();
    assert.equal(await vacuums(), before + 1, '12,000 dead rows: a vacuum');
    assert.ok((await deadRows()) >= 12_000, 'the long transaction kept them');
    await maintenance.runOnce();
    assert.equal(await vacuums(), before + 1, 'nothing died since (the rows it keeps are not counted again): no second vacuum');
    await holder.query('commit');
    await holder.end();
    // Autovacuum's turn (a VACUUM of the test stands in for it): they are gone.
    await sql.query('vacuum job_queue.jobs');
    assert.ok((await deadRows()) < 1_000, `the dead rows are gone (${await deadRows()} left)`);

    await killRows(6_000);
    before = await vacuums();
    await maintenance.runOnce();
    assert.equal(await vacuums(), before + 1, '12,000 rows died since: a vacuum');
    assert.deepEqual(errors, []);
    await t.close();
    apps.splice(apps.indexOf(t), 1);
  });
});

/**
 * On a server of its own, PostgreSQL 18 with password authentication (the embedded one):
 * the vacuum's connection is made from the pool's settings, password included, and a role
 * that does not own `jobs` but holds the MAINTAIN privilege on it (PostgreSQL 17+) vacuums it.
 */
describe('the vacuum of the jobs table on a server that asks for a password', () => {
  let postgres: PrivatePostgres;
  let sql: Client;
  const apps: TestApp[] = [];

  before(async () => {
    postgres = await PrivatePostgres.start();
    sql = await connect(postgres.url);
  });
  after(async () => {
    await Promise.all(apps.map((t) => t.close()));
    await sql?.end();
    await postgres?.destroy();
  });

  /** TypeORM given host, port, username, password and database rather than a url, as many apps do. */
  async function open(username: string, password: string, jobQueue: Record<string, unknown> = {}) {
    const { hostname, port, pathname } = new URL(postgres.url);
    const typeOrm = { url: undefined, host: hostname, port: Number(port), username, password, database: pathname.slice(1) };
    const opened = await openApp({ url: postgres.url, typeOrm, jobQueue });
    apps.push(opened.t);
    return opened;
  }

  it('connects with the password of the pool', async () => {
    const { hostname, port } = new URL(postgres.url);
    const { maintenance, errors, t } = await open('postgres', 'postgres');
    assert.equal((t.dataSource.options as { url?: string }).url, undefined);
    assert.equal(`${hostname}:${port}`, `${(t.dataSource.options as { host: string }).host}:${(t.dataSource.options as { port: number }).port}`);
    await sql.query('alter table job_queue.jobs set (autovacuum_enabled = false)');
    await killRowsOn(sql, 6_000);
    const before = await vacuumsOn(sql);
    await maintenance.runOnce();
    assert.deepEqual(errors, []);
    assert.equal(await vacuumsOn(sql), before + 1, '12,000 dead rows: one vacuum');
  });

  it('vacuums jobs with a role that holds the MAINTAIN privilege on it without owning it', async () => {
    assert.ok(Number((await sql.query(`select current_setting('server_version_num')::int as v`)).rows[0].v) >= 170000, 'PostgreSQL 17 or later');
    for (const t of apps) await t.app.get(JobQueueMaintenance).stop();
    await sql.query(`create role jq_maintainer login password 'maintainer'`);
    await sql.query(`grant usage on schema job_queue to jq_maintainer;
      grant select, insert, update, delete on all tables in schema job_queue to jq_maintainer;
      grant maintain on job_queue.jobs to jq_maintainer;
      grant all on all sequences in schema job_queue to jq_maintainer;
      grant execute on all functions in schema job_queue to jq_maintainer`);
    assert.equal((await sql.query(`select has_table_privilege('jq_maintainer', 'job_queue.jobs', 'MAINTAIN') as m`)).rows[0].m, true);
    const { maintenance, errors, logs } = await open('jq_maintainer', 'maintainer', { migrationsRun: false });
    await killRowsOn(sql, 6_000);
    const before = await vacuumsOn(sql);
    await maintenance.runOnce();
    assert.equal(maintenance.isLeader, true);
    assert.deepEqual(errors, []);
    assert.deepEqual(logs.filter((m) => /may not VACUUM/.test(m)), []);
    assert.equal(await vacuumsOn(sql), before + 1, '12,000 dead rows: one vacuum');
  });
});
