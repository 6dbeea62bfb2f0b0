import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Task } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { waitFor } from '../support/wait';

/** Flags and queue names whose SQL literals need care: quotes, a backslash, and array syntax. */
const AWKWARD = [`it's`, 'back\\slash', '"quoted"', '{brace,comma}', 'with space'];

const ran: string[] = [];

@Injectable()
class CountedTasks {
  @Task('rated', { rateLimit: { max: 100, per: '1s' } })
  rated(payload: { n: number }) {
    ran.push(`rated:${payload.n}`);
  }

  @Task('plain')
  plain(payload: { n: number }) {
    ran.push(`plain:${payload.n}`);
  }
}

/**
 * The counted claim of a task without group limits (sql/counted-claim.ts): the count, the claim
 * and the record of its starts in one statement, sent with the begin, the task's lock and the
 * commit in one message (worker/claim-connection.ts oneMessage), its parameters written into the
 * message (db/inline-parameters.ts) or to an SQL PREPARE'd statement's EXECUTE.
 */
describe('the counted claim of a rate-limited task', () => {
  let c: TestAppContext;

  before(async () => {
    c = await openTestApp('counted_claim', {
      providers: [CountedTasks],
      // a minute between polls: what the worker hears of limits set by SQL comes only from its claims
      jobQueue: { concurrency: 4, pollInterval: 60_000, forbiddenFlags: AWKWARD },
    });
  });
  after(() => closeTestApp(c));

  it('leaves jobs carrying forbidden flags, and jobs of paused queues, whose names need quoting; runs the others', async () => {
    for (const queue of AWKWARD) await c.t.jobs.pauseQueue(queue);
    // The pauses reach the worker on the jobs channel, before this job's notification: once it ran, the worker knows them.
    const heard = await c.t.jobs.add('plain', { n: 0 });
    await waitFor('a job added after the pauses to run', async () => (await c.t.jobs.getJob(heard.id))?.state === 'completed');
    const flagged = await c.t.jobs.addMany(AWKWARD.map((flag, n) => ({ identifier: 'rated', payload: { n }, flags: [flag] })));
    const queued = await c.t.jobs.addMany(AWKWARD.map((queueName, n) => ({ identifier: 'rated', payload: { n: 100 + n }, queueName })));
    const free = await c.t.jobs.addMany([0, 1, 2].map((n) => ({ identifier: 'rated', payload: { n: 200 + n } })));
    await waitFor('the jobs without a flag or a paused queue to run', async () => {
      const states = await Promise.all(free.map((job) => c.t.jobs.getJob(job.id)));
      return states.every((job) => job?.state === 'completed');
    });
    // A claim came after every flagged and queued job was there (they were added first): none of them was taken.
    for (const job of [...flagged, ...queued]) {
      const now = await c.t.jobs.getJob(job.id);
      assert.equal(now?.state, 'waiting', `job ${job.id} (${JSON.stringify(job.flags)} ${job.queueName}) is left: ${JSON.stringify(now)}`);
    }
    for (const queue of AWKWARD) await c.t.jobs.resumeQueue(queue);
    await waitFor('the queued jobs to run once their queues resume', async () => {
      const states = await Promise.all(queued.map((job) => c.t.jobs.getJob(job.id)));
      return states.every((job) => job?.state === 'completed');
    });
    await c.sql.query('delete from job_queue.jobs where id = any($1::bigint[])', [flagged.map((job) => job.id)]);
  });

  it('follows the limits stored when it counts, though the worker has not heard of them (set by SQL, no notification)', async () => {
    // One start a minute, stored the way setTaskLimits stores it, but without telling the workers
    // (the earlier test's starts forgotten: they would fill that minute's window).
    await c.sql.query(`delete from job_queue.task_starts where task_identifier = 'rated'`);
    await c.sql.query(`insert into job_queue.task_limits (task_identifier, limits) values ('rated', '{"rateLimit": {"max": 1, "perMs": 60000}}')`);
    try {
      const limited = await c.t.jobs.addMany([0, 1, 2].map((n) => ({ identifier: 'rated', payload: { n: 300 + n } })));
      const finished = async () => (await c.sql.query(`select 1 from job_queue.finished_jobs where id = any($1::bigint[])`, [limited.map((job) => job.id)])).rowCount ?? 0;
      await waitFor('one of them to run', async () => (await finished()) >= 1);
      // A job of another task, added after: once it ran, claim rounds came after the limited jobs were claimable.
      const later = await c.t.jobs.add('plain', { n: 1 });
      await waitFor('the later job of another task to run', async () => (await c.t.jobs.getJob(later.id))?.state === 'completed');
      assert.equal(await finished(), 1, 'one start under the stored limit (the decorator allows 100 a second)');
      const [{ started }] = (await c.sql.query<{ started: number }>(`select coalesce(sum(started), 0)::int as started from job_queue.task_starts where task_identifier = 'rated' and per_ms = 60000`)).rows;
      assert.equal(started, 1, 'recorded in the stored window');
    } finally {
      await c.t.jobs.resetTaskLimits('rated');
    }
  });
});
