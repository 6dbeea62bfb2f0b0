import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DataSource } from 'typeorm';
import { createJobQueueMigrations, JobQueueMigrations, JobQueueModule, JobQueueService } from '../../libs/job-queue/src';
import { NestFactory } from '@nestjs/core';
import { Module } from '@nestjs/common';
import { createTestApp } from '../support/app';
import { waitFor } from '../support/wait';
import { NotificationRecorder } from '../support/notifications';
import { connect, createTestDatabase } from '../support/database';
import * as migrationNames from '../../migrations/names';
import * as libraryNames from '../../libs/job-queue/src/sql/identifier';

/** Every migration, oldest first. */
const ALL_MIGRATIONS = ['CreateJobTables1763700000000', 'RecoveryAndQueueOrder1763800000000', 'JobLifecycle1763900000000', 'Operations1764000000000', 'ClaimByQueueHeads1764100000000', 'EventListeners1764200000000', 'Flows1764300000000', 'JobStepsAndBatches1764400000000', 'JobCounts1764500000000', 'Pauses1764600000000', 'Schedules1764700000000', 'TaskLimits1764800000000', 'JobGroups1764900000000', 'TaskFetchIndex1765000000000', 'JobsVacuumTruncate1765100000000', 'FlowAddOnce1765200000000', 'FlowSettleLinear1765300000000', 'FlowRetryKeepsFailures1765400000000', 'FlowEdgeStatistics1765500000000'];

describe('migrations', () => {
  it("the migrations' own names (channels, quoting) are the library's: the functions they create notify where workers listen", () => {
    for (const schema of ['job_queue', 'Other_Schema']) {
      assert.equal(migrationNames.jobsChannel(schema), libraryNames.jobsChannel(schema));
      assert.equal(migrationNames.finishedChannel(schema), libraryNames.finishedChannel(schema));
      assert.equal(migrationNames.cancelChannel(schema), libraryNames.cancelChannel(schema));
      assert.equal(migrationNames.eventsChannel(schema), libraryNames.eventsChannel(schema));
      assert.equal(migrationNames.quoteIdentifier(schema), libraryNames.quoteIdentifier(schema));
    }
  });

  it('createJobQueueMigrations refuses a schema that is not a plain identifier, before anything runs', () => {
    assert.throws(() => createJobQueueMigrations('bad-schema'), { code: 'JQ_INVALID_SCHEMA' });
  });

  it('several app instances booting at once on an empty database migrate it once', async () => {
    const db = await createTestDatabase('migrate');
    const apps = await Promise.all([1, 2, 3, 4].map(() => createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: '*' } })));
    try {
      const sql = await connect(db.url);
      const { rows } = await sql.query('select name from job_queue.migrations');
      assert.deepEqual(rows.map((r) => r.name), ALL_MIGRATIONS);
      const tables = (await sql.query(`select tablename from pg_tables where schemaname = 'job_queue' order by 1`)).rows;
      assert.deepEqual(tables.map((r) => r.tablename), ['blocked_jobs', 'event_listeners', 'finished_counts', 'finished_jobs', 'flows', 'job_count_deltas', 'job_counts', 'job_dependencies', 'job_queues', 'job_steps', 'jobs', 'known_crontabs', 'leases', 'migrations', 'pauses', 'task_limits', 'task_slots', 'task_starts', 'workers']);
      await sql.end();
      // every instance works
      for (const [i, t] of apps.entries()) await t.jobs.add('hello', { i });
    } finally {
      await Promise.all(apps.map((t) => t.close()));
      await db.drop();
    }
  });

  it('a custom schema gets its own tables, functions and migrations table; migrationsRun: false leaves the database alone', async () => {
    const db = await createTestDatabase('schema');
    try {
      const untouched = await createTestApp({ url: db.url, jobQueue: { schema: 'Other_Queue', migrationsRun: false, worker: false } });
      await untouched.close();
      const sql = await connect(db.url);
      assert.equal((await sql.query(`select count(*) from pg_namespace where nspname = 'Other_Queue'`)).rows[0].count, '0');

      const t = await createTestApp({ url: db.url, jobQueue: { schema: 'Other_Queue', worker: false, externalTasks: '*' } });
      const notifications = await NotificationRecorder.listen(db.url, libraryNames.jobsChannel('Other_Queue'));
      const job = await t.jobs.add('x', { a: 1 });
      assert.equal((await sql.query(`select count(*) from "Other_Queue".jobs where id = $1`, [job.id])).rows[0].count, '1');
      // The add's NOTIFY after its commit names the job by its sequence's currval (sql/notify-after.ts): a quoted schema's too.
      assert.deepEqual(await notifications.barrier(), [job.id], 'the add told the workers of its schema, naming its job');
      await notifications.end();
      await t.close();
      await sql.end();
    } finally {
      await db.drop();
    }
  });

  it('the exported migration classes run with TypeORM’s own migration runner', async () => {
    const db = await createTestDatabase('cli');
    const dataSource = new DataSource({ type: 'postgres', url: db.url, migrations: createJobQueueMigrations('cli_queue') });
    try {
      await dataSource.initialize();
      const ran = await dataSource.runMigrations();
      assert.deepEqual(ran.map((m) => m.name), ALL_MIGRATIONS);
      const [job] = await dataSource.query(`select * from cli_queue.add_job('from_cli')`);
      assert.equal(job.task_identifier, 'from_cli');
      // an app on that schema with migrationsRun: false uses the tables as they are
      @Module({ imports: [JobQueueModule.forRoot({ dataSource, schema: 'cli_queue', migrationsRun: false, worker: false, externalTasks: '*' })] })
      class AppModule {}
      const app = await NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false });
      assert.equal((await app.get(JobQueueService).add('via_app')).taskIdentifier, 'via_app');
      await app.close();
    } finally {
      await dataSource.destroy();
      await db.drop();
    }
  });

  it('the module and a TypeORM runner given the same classes share one ledger, in either order and at once', async () => {
    const db = await createTestDatabase('ledger');
    const sql = await connect(db.url);
    // a team that runs the job-queue migrations through its own DataSource, and keeps the module's default migrationsRun
    const viaTypeOrm = (migrationsTransactionMode: 'all' | 'none' = 'all') =>
      createTestApp({ url: db.url, typeOrm: { migrations: JobQueueMigrations, migrationsRun: true, migrationsTransactionMode }, jobQueue: { worker: false, externalTasks: '*' } });
    const viaModule = () => createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: '*' } });
    const ledgers = async () => ({
      ours: (await sql.query('select name from job_queue.migrations order by id')).rows.map((r) => r.name),
      typeorm: (await sql.query(`select name from public.migrations order by id`).catch(() => ({ rows: [] }))).rows.map((r: { name: string }) => r.name),
    });
    const reset = async () => {
      await sql.query('drop schema job_queue cascade');
      await sql.query('drop table if exists public.migrations');
    };
    try {
      // TypeORM first (at DataSource initialisation), then the module, in one app
      const both = await viaTypeOrm();
      await both.jobs.add('works');
      await both.close();
      assert.deepEqual(await ledgers(), { ours: ALL_MIGRATIONS, typeorm: ALL_MIGRATIONS });

      // the module first, then an app whose TypeORM runner finds the tables made
      await reset();
      await (await viaModule()).close();
      const later = await viaTypeOrm();
      await later.jobs.add('works');
      await later.close();
      assert.deepEqual(await ledgers(), { ours: ALL_MIGRATIONS, typeorm: ALL_MIGRATIONS });

      // both kinds booting at once on an empty database, TypeORM's runner with and without its own transaction
      for (const mode of ['all', 'none'] as const) {
        await reset();
        const apps = await Promise.all([viaTypeOrm(mode), viaModule(), viaModule()]); // one TypeORM runner: two would race to create TypeORM's own table
        for (const t of apps) await t.jobs.add('works');
        await Promise.all(apps.map((t) => t.close()));
        assert.deepEqual((await ledgers()).ours, ALL_MIGRATIONS, `TypeORM mode ${mode}`);
        assert.equal((await sql.query(`select count(*)::int as n from job_queue.jobs`)).rows[0].n, 3);
      }
    } finally {
      await sql.end();
      await db.drop();
    }
  });

  it('an index build waits out a long transaction elsewhere in the database, rather than failing the migration', async () => {
    const db = await createTestDatabase('long_tx');
    const sql = await connect(db.url);
    const holder = await connect(db.url);
    try {
      // the first migration only, as an earlier version left it
      const first = new DataSource({ type: 'postgres', url: db.url, migrations: [createJobQueueMigrations()[0]] });
      await first.initialize();
      await first.runMigrations();
      await first.destroy();
      // a report (or pg_dump) with an old snapshot, on tables that are not ours
      await holder.query('begin isolation level repeatable read');
      await holder.query('select count(*) from pg_class');
      const booting = createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: '*' } });
      await waitFor('the index build to have waited longer than a lock timeout would allow', async () =>
        (await sql.query(`select 1 from pg_stat_activity where datname = current_database() and query ilike 'create index concurrently%' and now() - query_start > interval '3 seconds'`)).rows.length > 0,
      );
      await holder.query('commit');
      const t = await booting;
      await t.close();
      assert.deepEqual((await sql.query('select name from job_queue.migrations order by id')).rows.map((r) => r.name), ALL_MIGRATIONS);
      assert.deepEqual((await sql.query(`select indexrelid::regclass::text as name from pg_index where not indisvalid`)).rows, []);
    } finally {
      await holder.end();
      await sql.end();
      await db.drop();
    }
  });
});
