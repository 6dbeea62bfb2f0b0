import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { JobEntity, JobQueueModule, JobQueueService } from '../../libs/job-queue/src';
import { createTestDatabase } from '../support/database';

describe('which DataSource the module uses', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  before(async () => {
    db = await createTestDatabase('datasource');
  });
  after(async () => db.drop());

  const boot = async (module: Type) => {
    const app = await NestFactory.createApplicationContext(module, { logger: false, abortOnError: false });
    return { app, jobs: app.get(JobQueueService) };
  };

  it('uses a DataSource given in the options, before any @nestjs/typeorm one', async () => {
    const given = new DataSource({ type: 'postgres', url: db.url, applicationName: 'given' });
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: 'postgres://nobody@127.0.0.1:1/none', manualInitialization: true }),
        JobQueueModule.forRoot({ dataSource: given, worker: false, externalTasks: '*' }),
      ],
    })
    class AppModule {}
    const { app, jobs } = await boot(AppModule);
    const job = await jobs.add('given');
    const [row] = await given.query(`select application_name from pg_stat_activity where pid = pg_backend_pid()`);
    assert.equal(row.application_name, 'given');
    assert.equal((await given.query('select count(*) from job_queue.jobs where id = $1', [job.id]))[0].count, '1');
    await app.close();
    await given.destroy();
  });

  it('uses the named @nestjs/typeorm DataSource', async () => {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: 'postgres://nobody@127.0.0.1:1/none', manualInitialization: true }),
        TypeOrmModule.forRoot({ name: 'jobsdb', type: 'postgres', url: db.url, entities: [JobEntity] }),
        JobQueueModule.forRootAsync({ useFactory: () => ({ dataSourceName: 'jobsdb', worker: false, externalTasks: '*' }) }),
      ],
    })
    class AppModule {}
    const { app, jobs } = await boot(AppModule);
    const job = await jobs.add('named');
    assert.equal((await jobs.jobRepository<JobEntity>().findOneByOrFail({ id: job.id })).taskIdentifier, 'named');
    await app.close();
  });

  it('opens a connection of its own when the app has no TypeORM module, and closes it with the app', async () => {
    @Module({ imports: [JobQueueModule.forRoot({ connection: { url: db.url }, worker: false, externalTasks: '*' })] })
    class AppModule {}
    const { app, jobs } = await boot(AppModule);
    const job = await jobs.add('own');
    assert.equal((await jobs.getJob(job.id))?.taskIdentifier, 'own');
    assert.equal(await jobs.jobRepository<JobEntity>().countBy({ taskIdentifier: 'own' }), 1);
    await app.close();
  });

  it('says clearly when there is no DataSource at all', async () => {
    @Module({ imports: [JobQueueModule.forRoot({ worker: false })] })
    class AppModule {}
    await assert.rejects(boot(AppModule), { code: 'JQ_NO_DATA_SOURCE' });
  });
});
