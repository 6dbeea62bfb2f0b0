import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { JobEntity, JobQueueModule, JobQueueService } from '../../libs/job-queue/src';
import { connect, createTestDatabase } from '../support/database';
import { waitForValue } from '../support/wait';

describe('which DataSource the module uses', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  /** Where the app's default DataSource points: a job must not land here when another one is chosen. */
  let other: Awaited<ReturnType<typeof createTestDatabase>>;
  before(async () => {
    db = await createTestDatabase('datasource');
    other = await createTestDatabase('datasource_other');
  });
  after(async () => {
    await db.drop();
    await other.drop();
  });

  /** Looks at a database from outside the app: its job ids, or null when it has no job tables. */
  const jobIdsIn = async (url: string) => {
    const sql = await connect(url);
    try {
      const { rows } = await sql.query(`select to_regclass('job_queue.jobs') is not null as present`);
      if (!rows[0].present) return null;
      return (await sql.query('select id::text from job_queue.jobs order by id')).rows.map((r) => r.id as string);
    } finally {
      await sql.end();
    }
  };

  const boot = async (module: Type) => {
    const app = await NestFactory.createApplicationContext(module, { logger: false, abortOnError: false });
    return { app, jobs: app.get(JobQueueService) };
  };

  it('uses a DataSource given in the options, before any @nestjs/typeorm one', async () => {
    const given = new DataSource({ type: 'postgres', url: db.url });
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: other.url }), // a working default, which must not be used
        JobQueueModule.forRoot({ dataSource: given, worker: false, externalTasks: '*' }),
      ],
    })
    class AppModule {}
    const { app, jobs } = await boot(AppModule);
    const job = await jobs.add('given');
    await app.close();
    await given.destroy();
    assert.deepEqual(await jobIdsIn(db.url), [job.id], 'the job is in the given database');
    assert.equal(await jobIdsIn(other.url), null, 'the default DataSource got no tables and no job');
  });

  it('uses the named @nestjs/typeorm DataSource', async () => {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: other.url }),
        TypeOrmModule.forRoot({ name: 'jobsdb', type: 'postgres', url: db.url, entities: [JobEntity] }),
        JobQueueModule.forRootAsync({ useFactory: () => ({ dataSourceName: 'jobsdb', worker: false, externalTasks: '*' }) }),
      ],
    })
    class AppModule {}
    const { app, jobs } = await boot(AppModule);
    const job = await jobs.add('named');
    assert.equal((await jobs.jobRepository<JobEntity>().findOneByOrFail({ id: job.id })).taskIdentifier, 'named');
    await app.close();
    assert.ok((await jobIdsIn(db.url))?.includes(job.id), 'the job is in the named DataSource\'s database');
    assert.equal(await jobIdsIn(other.url), null, 'the default DataSource got no tables and no job');
  });

  it('opens a connection of its own when the app has no TypeORM module, and closes it with the app', async () => {
    // A name of this test's own, to find the app's backends in pg_stat_activity; and a pool
    // that never closes idle connections by itself (pg's default does after 10 s), so that
    // only closing the app can make them go.
    const applicationName = 'jq-own-connection-test';
    const connection = { url: db.url, applicationName, extra: { idleTimeoutMillis: 0 } };
    @Module({ imports: [JobQueueModule.forRoot({ connection, worker: false, externalTasks: '*' })] })
    class AppModule {}
    const { app, jobs } = await boot(AppModule);
    let closed = false;
    const sql = await connect(db.url);
    try {
      const backends = `select count(*)::int from pg_stat_activity where datname = current_database() and application_name = $1`;
      const job = await jobs.add('own');
      assert.equal((await jobs.getJob(job.id))?.taskIdentifier, 'own');
      assert.equal(await jobs.jobRepository<JobEntity>().countBy({ taskIdentifier: 'own' }), 1);
      const open = (await sql.query(backends, [applicationName])).rows[0].count as number;
      assert.ok(open >= 1, `the app's own connection is open, under its application_name (${open} backends)`);
      await app.close();
      closed = true;
      // a backend takes a moment to go after its client disconnects
      await waitForValue(sql, 'the app’s own connections to close with the app', backends, 0, [applicationName]);
      assert.ok((await jobIdsIn(db.url))?.includes(job.id), 'the job is in the database of the connection options');
    } finally {
      if (!closed) await app.close(); // a failure must not leave its pool holding the test run open
      await sql.end();
    }
  });

  it('says clearly when there is no DataSource at all', async () => {
    @Module({ imports: [JobQueueModule.forRoot({ worker: false })] })
    class AppModule {}
    await assert.rejects(boot(AppModule), { code: 'JQ_NO_DATA_SOURCE' });
  });
});
