import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { JobEntity } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { NotificationRecorder } from '../support/notifications';

@Entity({ name: 'users' })
class User {
  @PrimaryGeneratedColumn() id!: number;
  @Column({ type: 'text' }) email!: string;
}

describe('JobQueueService.add and addMany', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let t: TestApp;
  let notifications: NotificationRecorder;
  let observer: Client;

  before(async () => {
    db = await createTestDatabase('add');
    t = await createTestApp({ url: db.url, entities: [User], jobQueue: { worker: false, externalTasks: '*' } });
    notifications = await NotificationRecorder.listen(db.url, 'job_queue:jobs');
    observer = await connect(db.url);
  });

  after(async () => {
    await notifications.end();
    await observer.end();
    await t.close();
    await db.drop();
  });

  const countJobs = async (identifier: string) =>
    Number((await observer.query('select count(*) from job_queue.jobs where task_identifier = $1', [identifier])).rows[0].count);

  it('adds a job on the pool and returns it with a string id', async () => {
    const job = await t.jobs.add('plain', { a: 1 });
    assert.equal(typeof job.id, 'string');
    assert.deepEqual(job.payload, { a: 1 });
    assert.equal(job.attempts, 0);
    assert.equal(job.maxAttempts, 25);
    assert.equal(job.priority, 0);
    assert.deepEqual(job.flags, []);
    assert.equal(await countJobs('plain'), 1);
    // what add() returns is what the table holds (a keyless add gets back only what the database decides)
    assert.deepEqual(job, await t.jobs.getJob(job.id));
    const queued = await t.jobs.add('plain_queued', { b: [1, 'x'] }, { queueName: 'q-add', priority: -3, maxAttempts: 4, flags: ['f'], runAt: new Date(Date.now() + 60_000) });
    assert.deepEqual(queued, await t.jobs.getJob(queued.id));
    assert.equal((await observer.query(`select count(*)::int as n from job_queue.job_queues where queue_name = 'q-add'`)).rows[0].n, 1, 'its queue row');
    assert.equal(await t.jobs.getJob('999999999'), null);
  });

  it('commits the job with the entity it is about, and notifies only at commit', async () => {
    await notifications.barrier(); // the earlier test's notification is behind us
    let seenInside = -1;
    let notifiedInside: string[] = [];
    const user = await t.dataSource.transaction(async (manager) => {
      const saved = await manager.save(User, { email: 'a@example.com' });
      await t.jobs.add('welcome', { userId: saved.id }, { manager });
      seenInside = await countJobs('welcome');
      notifiedInside = await notifications.barrier();
      return saved;
    });
    assert.equal(seenInside, 0, 'the job is not visible before the commit');
    assert.deepEqual(notifiedInside, [], 'no notification before the commit');
    const rows = (await observer.query(`select payload from job_queue.jobs where task_identifier = 'welcome'`)).rows;
    assert.deepEqual(rows, [{ payload: { userId: user.id } }]);
    assert.equal((await observer.query('select count(*) from users')).rows[0].count, '1');
    assert.deepEqual(await notifications.barrier(), [''], 'one notification, at the commit');
  });

  it('rolls the job back with the entity', async () => {
    await assert.rejects(
      t.dataSource.transaction(async (manager) => {
        await manager.save(User, { email: 'b@example.com' });
        await t.jobs.add('welcome_rolled_back', {}, { manager });
        throw new Error('boom');
      }),
      /boom/,
    );
    assert.equal(await countJobs('welcome_rolled_back'), 0);
    assert.equal((await observer.query(`select count(*) from users where email = 'b@example.com'`)).rows[0].count, '0');
  });

  it('addMany adds every job in one statement, in order, with one notification', async () => {
    await notifications.barrier();
    const jobs = await t.jobs.addMany([
      { identifier: 'bulk', payload: { n: 1 } },
      { identifier: 'bulk', payload: { n: 2 }, queueName: 'q1', priority: 5, flags: ['x'] },
      { identifier: 'bulk', payload: { n: 3 }, maxAttempts: 3, runAt: new Date(Date.now() + 60_000) },
    ]);
    assert.deepEqual(jobs.map((j) => (j.payload as { n: number }).n), [1, 2, 3]);
    assert.equal(jobs[1].queueName, 'q1');
    assert.equal(jobs[1].priority, 5);
    assert.deepEqual(jobs[1].flags, ['x']);
    assert.equal(jobs[2].maxAttempts, 3);
    assert.equal(await countJobs('bulk'), 3);
    assert.equal((await observer.query(`select count(*) from job_queue.job_queues where queue_name = 'q1'`)).rows[0].count, '1');
    assert.deepEqual(await notifications.barrier(), [''], 'one notification for the three jobs');
    // what addMany returns is what the table holds (it is built from the specs and the ids the insert returns)
    for (const job of jobs) assert.deepEqual(job, await t.jobs.getJob(job.id));
  });

  it('addMany with job keys, inside a transaction that rolls back, leaves nothing', async () => {
    await assert.rejects(
      t.dataSource.transaction(async (manager) => {
        const jobs = await t.jobs.addMany(
          [
            { identifier: 'keyed_bulk', jobKey: 'k1' },
            { identifier: 'keyed_bulk', jobKey: 'k2' },
            { identifier: 'keyed_bulk', jobKey: 'k1', payload: { second: true } },
          ],
          { manager },
        );
        assert.equal(jobs.length, 3);
        assert.equal(jobs[2].id, jobs[0].id, 'the third replaces the first');
        assert.equal(jobs[2].revision, 1);
        throw new Error('rollback');
      }),
      /rollback/,
    );
    assert.equal(await countJobs('keyed_bulk'), 0);
  });

  it('exposes the jobs through a TypeORM repository', async () => {
    const repository = t.jobs.jobRepository<JobEntity>();
    const found = await repository.find({ where: { taskIdentifier: 'plain' } });
    assert.equal(found.length, 1);
    assert.deepEqual(found[0].payload, { a: 1 });
    assert.equal(await t.dataSource.getRepository(JobEntity).count({ where: { taskIdentifier: 'bulk' } }), 3);
  });
});
