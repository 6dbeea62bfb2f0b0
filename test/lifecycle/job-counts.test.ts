import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { JobQueueMaintenance } from '../../libs/job-queue/src';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { foldJobCounts } from '../../libs/job-queue/src/maintenance/count-folder';
import type { PinnedConnection } from '../../libs/job-queue/src/db/pinned-connection';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect } from '../support/database';
import { scannedJobCounts } from '../support/scanned-counts';

const statements = createQueries('job_queue');

/** What foldJobCounts needs of a worker's pinned connection: its statements, run on `client`. */
const pinnedOn = (client: Client): PinnedConnection => ({
  workerId: 'test',
  run: async (statement, values) => (await client.query(statements[statement] as string, values)).rows,
});

/**
 * countJobs() reads counters (migration JobCounts1764500000000), kept by statement triggers on
 * every insert into and delete from jobs and blocked_jobs, whoever runs it. Each step below
 * changes jobs one way, and the counts are then compared with a scan of every row
 * (scannedJobCounts), before the maintenance leader's fold and after it.
 */
describe('countJobs from counters', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    ({ db, sql, t } = await openTestApp('job_counts', { jobQueue: { worker: false, externalTasks: '*' } }));
    await sql.query(`insert into job_queue.workers (id) values ('some-worker')`);
  });
  after(() => closeTestApp({ db, sql, t }));

  const deltas = async () => (await sql.query<{ n: number }>('select count(*)::int as n from job_queue.job_count_deltas')).rows[0].n;
  const fold = () => foldJobCounts(pinnedOn(sql), 60_000);
  /** countJobs() equals the scan, before a fold and after one, which leaves no delta behind. */
  async function assertExact(step: string): Promise<void> {
    assert.deepEqual(await t.jobs.countJobs(), await scannedJobCounts(sql), `${step}: before the fold`);
    await fold();
    assert.equal(await deltas(), 0, `${step}: the fold took every delta`);
    assert.deepEqual(await t.jobs.countJobs(), await scannedJobCounts(sql), `${step}: after the fold`);
  }

  it('follows every way a job comes, changes and goes, the library\'s and plain SQL\'s', async () => {
    const steps: Array<[string, () => Promise<unknown>]> = [
      ['add() due and scheduled, in queues and not', async () => {
        await t.jobs.add('a', {});
        await t.jobs.add('a', {}, { queueName: 'q1' });
        await t.jobs.add('b', {}, { runAt: new Date(Date.now() + 3_600_000) });
        await t.jobs.add('b', {}, { queueName: 'q2', runAt: new Date(Date.now() + 3_600_000) });
      }],
      ['addMany() with and without keys', () => t.jobs.addMany([...Array.from({ length: 30 }, (_, i) => ({ identifier: i % 2 ? 'a' : 'b', queueName: i % 3 ? undefined : 'q1' })), { identifier: 'a', jobKey: 'k1' }, { identifier: 'b', jobKey: 'k2', queueName: 'q2' }])],
      ['a keyed add that moves a waiting job to another task and queue', () => t.jobs.add('c', {}, { jobKey: 'k1', queueName: 'q3' })],
      ['an add in a transaction rolled back', () =>
        t.dataSource.transaction(async (manager) => {
          await t.jobs.add('a', {}, { manager });
          throw new Error('rolled back');
        }).catch(() => undefined)],
      ['add_job() and plain SQL inserts', () => sql.query(`select job_queue.add_job('d'); insert into job_queue.jobs (task_identifier, queue_name) select 'd', 'q1' from generate_series(1, 5)`)],
      ['held, started, retrying, failed and cancelled rows', () =>
        sql.query(`
          update job_queue.jobs set locked_at = now(), locked_by = 'some-worker', attempts = 1, started_at = now() where id in (select id from job_queue.jobs where task_identifier = 'a' order by id limit 3);
          update job_queue.jobs set locked_at = now(), locked_by = 'some-worker', attempts = 1 where id in (select id from job_queue.jobs where task_identifier = 'a' and locked_at is null order by id limit 2);
          update job_queue.jobs set attempts = 1, run_at = now() + interval '1 minute' where id in (select id from job_queue.jobs where task_identifier = 'b' and locked_at is null order by id limit 4);
          update job_queue.jobs set attempts = max_attempts where id in (select id from job_queue.jobs where task_identifier = 'd' order by id limit 1);
          update job_queue.jobs set cancel_requested_at = now() where id in (select id from job_queue.jobs where task_identifier = 'd' and attempts = 0 order by id limit 1)`)],
      ['a job rescheduled and one whose time came', () =>
        sql.query(`
          update job_queue.jobs set run_at = now() + interval '1 day' where id in (select id from job_queue.jobs where task_identifier = 'c' and attempts = 0 order by id limit 1);
          update job_queue.jobs set run_at = now() - interval '1 second', created_at = now() - interval '1 minute' where id in (select id from job_queue.jobs where task_identifier = 'b' and attempts = 0 and run_at > now() order by id limit 1)`)],
      ['a flow: its blocked jobs', () =>
        t.jobs.addFlow([
          { ref: 'root', identifier: 'flow_root' },
          { ref: 'left', identifier: 'flow_leaf', dependsOn: ['root'], queueName: 'q1' },
          { ref: 'right', identifier: 'flow_leaf', dependsOn: ['root'] },
          { ref: 'join', identifier: 'flow_join', dependsOn: ['left', 'right'] },
        ])],
      ['the flow\'s root completed: its dependents unblocked', async () => {
        const [{ id }] = (await sql.query(`select id::text from job_queue.jobs where task_identifier = 'flow_root'`)).rows;
        await t.jobs.completeJobs([id]);
      }],
      ['cancel, remove and complete on request', async () => {
        const { rows } = await sql.query(`select id::text from job_queue.jobs where locked_at is null and task_identifier = 'a' order by id limit 3`);
        await t.jobs.cancelJob(rows[0].id);
        await sql.query(`select job_queue.remove_job('k2')`);
        await t.jobs.completeJobs([rows[1].id, rows[2].id]);
      }],
      ['plain SQL deletes', () => sql.query(`delete from job_queue.jobs where task_identifier = 'd' and locked_at is null and attempts = 0`)],
      ['the held jobs released', () => sql.query(`delete from job_queue.jobs where locked_by = 'some-worker'`)],
      ['jobs truncated', () => sql.query(`truncate job_queue.jobs`)],
      ['adds after the truncate', () => t.jobs.addMany(Array.from({ length: 3 }, () => ({ identifier: 'e' })))],
    ];
    for (const [step, change] of steps) {
      await change();
      await assertExact(step);
    }
    const { byState } = await t.jobs.countJobs();
    assert.equal(byState.waiting, 3, 'what is left after the truncate');
  });

  it('an add in an open transaction makes no other add wait, is counted once it commits, and a fold meanwhile leaves it alone', async () => {
    let commit!: () => void;
    const open = new Promise<void>((resolve) => (commit = resolve));
    let added!: () => void;
    const inside = new Promise<void>((resolve) => (added = resolve));
    const before = (await t.jobs.countJobs()).byTask.slow?.waiting ?? 0;
    const held = t.dataSource.transaction(async (manager) => {
      await t.jobs.add('slow', {}, { manager });
      added();
      await open;
    });
    await inside;
    // Another add of the same task, in a transaction that gives up after 500 ms of waiting for any lock.
    await t.dataSource.transaction(async (manager) => {
      await manager.query(`set local lock_timeout = '500ms'`);
      await t.jobs.add('slow', {}, { manager });
    });
    assert.equal((await t.jobs.countJobs()).byTask.slow.waiting, before + 1, 'the open transaction\'s job is not counted yet');
    await fold();
    commit();
    await held;
    assert.equal(await deltas(), 1, 'the fold before the commit left the open transaction\'s delta alone');
    assert.equal((await t.jobs.countJobs()).byTask.slow.waiting, before + 2, 'counted once committed');
    await assertExact('after the commit');
  });

  it('adds and releases racing folds from four connections leave the counts exact', async () => {
    const rounds = 40;
    const writer = async (n: number) => {
      for (let i = 0; i < rounds; i++) {
        const jobs = await t.jobs.addMany(Array.from({ length: 3 }, () => ({ identifier: `race_${n % 2}`, queueName: i % 2 ? `race_q${n}` : undefined })));
        if (i % 3 === 0) await t.jobs.completeJobs([jobs[0].id]);
        await t.jobs.add(`race_${n % 2}`, {});
      }
    };
    let writing = true;
    // two folders, on connections of their own, as two leaders overlapping after a lease moved
    const second = await connect(db.url);
    after(() => second.end());
    const folders = [sql, second].map(async (client) => {
      let folds = 0;
      while (writing) {
        await client.query(statements.foldJobCounts, [5]);
        await client.query(statements.deleteEmptyJobCounts);
        folds++;
      }
      return folds;
    });
    await Promise.all([0, 1, 2, 3].map(writer));
    writing = false;
    const folds = await Promise.all(folders);
    assert.ok(folds.every((n) => n > 1), `both folded during the writes (${folds.join(', ')} folds)`);
    await assertExact('after the race');
  });

  it('a pile of deltas bigger than a batch folds over several batches, and a round folds for a bounded time', async () => {
    await sql.query(`do $$ begin for i in 1..25000 loop insert into job_queue.jobs (task_identifier) values ('pile'); end loop; end $$`);
    assert.ok((await deltas()) >= 25_000, 'one delta per statement');
    assert.equal(await foldJobCounts(pinnedOn(sql), 60_000), 25_000, 'all of them, batch after batch');
    assert.equal(await deltas(), 0);
    await sql.query(`do $$ declare r record; begin for r in select id from job_queue.jobs where task_identifier = 'pile' loop delete from job_queue.jobs where id = r.id; end loop; end $$`);
    assert.equal(await foldJobCounts(pinnedOn(sql), 0), 10_000, 'with no time left, one batch');
    await assertExact('after the pile');
  });

  it('recount_jobs() repairs counts that drifted (triggers disabled); TRUNCATE and recount_jobs() refuse a transaction stricter than READ COMMITTED', async () => {
    await sql.query('alter table job_queue.jobs disable trigger jobs_counted_insert');
    await sql.query(`insert into job_queue.jobs (task_identifier) select 'uncounted' from generate_series(1, 7)`);
    await sql.query('alter table job_queue.jobs enable trigger jobs_counted_insert');
    assert.notDeepEqual(await t.jobs.countJobs(), await scannedJobCounts(sql), 'drifted');
    await sql.query('select job_queue.recount_jobs()');
    await assertExact('after recount_jobs()');
    for (const statement of ['truncate job_queue.jobs', 'select job_queue.recount_jobs()']) {
      await sql.query('begin isolation level repeatable read');
      await assert.rejects(sql.query(statement), /needs a READ COMMITTED transaction, not repeatable read/, statement);
      await sql.query('rollback');
    }
    await assertExact('nothing changed');
  });

  it('the maintenance leader folds the deltas each round', async () => {
    await t.jobs.addMany(Array.from({ length: 5 }, () => ({ identifier: 'folded' })));
    await t.jobs.add('folded', {});
    assert.ok((await deltas()) >= 2, 'each add left a delta');
    await t.app.get(JobQueueMaintenance).runOnce();
    assert.equal(await deltas(), 0, 'none is left after a round');
    assert.equal((await sql.query(`select count from job_queue.job_counts where task_identifier = 'folded'`)).rows[0].count, '6');
    await assertExact('after the round');
  });
});
