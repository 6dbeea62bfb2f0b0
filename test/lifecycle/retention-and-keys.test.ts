import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import type { Client } from 'pg';
import { JobQueueEntities, JobQueueMaintenance, JobQueueModule, Task, type JobContext, type JobKeyMode, type JobQueueEvent, type JobState } from '../../libs/job-queue/src';
import { closeTestApp, createTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor, waitForValue, type Queryable } from '../support/wait';

/** Per job id, what lets a gated handler go on; set while the handler waits at its gate. */
const gates = new Map<string, () => void>();

@Injectable()
class Tasks {
  @Task('quick')
  async quick(payload: { v?: number }) {
    return { v: payload.v ?? null };
  }

  @Task('boom')
  async boom() {
    throw new Error('boom');
  }

  @Task('gated')
  async gated(_payload: unknown, ctx: JobContext) {
    await new Promise<void>((resolve) => gates.set(ctx.job.id, resolve));
  }
}

const STATES: JobState[] = ['blocked', 'waiting', 'scheduled', 'running', 'retrying', 'completed', 'failed', 'cancelled'];

/** Inserts `count` finished jobs of task `task` in `state` that finished `ago` (an interval) ago, as history a run left; returns their ids. */
async function insertHistory(sql: Queryable, state: JobState, ago: string, count: number, task = 'history'): Promise<string[]> {
  const { rows } = await sql.query(
    `insert into job_queue.finished_jobs (id, task_identifier, payload, priority, run_at, attempts, max_attempts, flags, state, created_at, started_at, finished_at)
     select nextval(pg_get_serial_sequence('job_queue.jobs', 'id')), $4, '{}', 0, now() - $2::interval, 1, 25, '{}', $1,
            now() - $2::interval, now() - $2::interval, now() - $2::interval
     from generate_series(1, $3)
     returning id::text`,
    [state, ago, count, task],
  );
  return rows.map((r) => r.id as string);
}

/** Unfinished jobs of a task nobody here runs, one per live state a worker leaves alone: waiting, scheduled, retrying. */
async function insertLiveJobs(sql: Queryable): Promise<Record<string, JobState>> {
  const id = async (text: string) => (await sql.query(text)).rows[0].id as string;
  const waiting = await id(`select id::text from job_queue.add_job('elsewhere')`);
  const scheduled = await id(`select id::text from job_queue.add_job('elsewhere', run_at => now() + interval '1 hour')`);
  const retrying = await id(`select id::text from job_queue.add_job('elsewhere')`);
  await sql.query(
    `update job_queue.jobs set attempts = 1, last_error = 'try again', run_at = now() + interval '1 hour', first_run_at = run_at,
       errors = jsonb_build_array(jsonb_build_object('at', now(), 'attempt', 1, 'message', 'try again', 'code', null))
     where id = $1`,
    [retrying],
  );
  return { [waiting]: 'waiting', [scheduled]: 'scheduled', [retrying]: 'retrying' };
}

/** Every row of `jobs`, whole, to compare before and after. */
const jobsSnapshot = async (sql: Queryable) => (await sql.query('select to_jsonb(j) as row from job_queue.jobs j order by id')).rows;
const finishedIds = async (sql: Queryable, state: JobState) =>
  (await sql.query('select f.id::text from job_queue.finished_jobs f where f.state = $1 order by f.id', [state])).rows.map((r) => r.id as string);

/** countJobs() agrees with count(*) of the rows, per state and per task, finished and unfinished. */
async function assertCountsMatchRows(t: TestApp, sql: Queryable, live: Record<string, JobState>) {
  const report = await t.jobs.countJobs();
  const { rows } = await sql.query(`select state, task_identifier, count(*)::int as n from job_queue.finished_jobs group by 1, 2`);
  const byState = Object.fromEntries(STATES.map((s) => [s, 0]));
  const byTask: Record<string, Record<string, number>> = {};
  const add = (task: string, state: string, n: number) => {
    byState[state] += n;
    (byTask[task] ??= Object.fromEntries(STATES.map((s) => [s, 0])))[state] += n;
  };
  for (const row of rows) add(row.task_identifier as string, row.state as string, row.n as number);
  for (const [id, state] of Object.entries(live)) {
    const task = (await sql.query('select task_identifier from job_queue.jobs where id = $1', [id])).rows[0].task_identifier as string;
    add(task, state, 1);
  }
  assert.deepEqual(report.byState, byState, 'countJobs().byState');
  assert.deepEqual(report.byTask, byTask, 'countJobs().byTask');
}

/**
 * Retention: the maintenance leader deletes finished jobs older than their state's
 * retention (here completed 2s, failed forever, cancelled at once), and nothing else.
 * The app is a producer (worker: false): maintenance runs when the test calls runOnce().
 */
describe('retention of finished jobs', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  let maintenance: JobQueueMaintenance;

  before(async () => {
    ({ db, sql, t } = await openTestApp('lifecycle_retention', {
      providers: [Tasks],
      jobQueue: { worker: false, externalTasks: ['elsewhere', 'history'], retention: { completed: '2s', failed: null, cancelled: 0 } },
    }));
    maintenance = t.app.get(JobQueueMaintenance);
  });
  beforeEach(() => sql.query('delete from job_queue.jobs; delete from job_queue.finished_jobs'));
  afterEach(() => {
    for (const go of gates.values()) go();
    gates.clear();
  });
  after(() => closeTestApp({ db, sql, t }));

  it('deletes expired completed and cancelled jobs, keeps failed ones and unexpired ones, touches no live job', async () => {
    // finished by the worker and by a cancel: completed just now, failed, cancelled
    const [completed, failed, cancelled] = await t.jobs.addMany([{ identifier: 'quick' }, { identifier: 'boom', maxAttempts: 1 }, { identifier: 'elsewhere' }]);
    await t.jobs.cancelJob(cancelled.id);
    await t.worker.runUntilIdle();
    // history: completed and cancelled an hour ago, failed a month ago
    await insertHistory(sql, 'completed', '1 hour', 3);
    const oldFailed = await insertHistory(sql, 'failed', '30 days', 2);
    await insertHistory(sql, 'cancelled', '1 hour', 2);
    // live: waiting, scheduled, retrying, and one running here
    const live = await insertLiveJobs(sql);
    const gated = await t.jobs.add('gated');
    const run = t.worker.runUntilIdle();
    await waitFor('the gated job to start', () => gates.has(gated.id));
    live[gated.id] = 'running';
    const liveRows = await jobsSnapshot(sql);

    await maintenance.runOnce();
    assert.equal(maintenance.isLeader, true);
    assert.deepEqual(await finishedIds(sql, 'completed'), [completed.id], 'the old completed jobs are gone, the new one kept');
    assert.deepEqual(await finishedIds(sql, 'failed'), [...oldFailed, failed.id].sort((a, b) => Number(a) - Number(b)), 'failed jobs are kept forever');
    assert.deepEqual(await finishedIds(sql, 'cancelled'), [], 'cancelled jobs are kept for 0 ms');
    assert.deepEqual(await jobsSnapshot(sql), liveRows, 'no unfinished job was touched');
    for (const [id, state] of Object.entries(live)) assert.equal((await t.jobs.getJob(id))?.state, state);
    await assertCountsMatchRows(t, sql, live);

    // two seconds after it completed, the new completed job goes too
    await waitForValue(sql, 'the completed job to be 2 s old', `select count(*)::int from job_queue.finished_jobs where state = 'completed' and finished_at > now() - interval '2 seconds'`, 0);
    await maintenance.runOnce();
    assert.deepEqual(await finishedIds(sql, 'completed'), []);
    assert.equal(await t.jobs.getJob(completed.id), null);
    assert.equal((await t.jobs.getJob(failed.id))?.state, 'failed');
    await assertCountsMatchRows(t, sql, live);

    gates.get(gated.id)!();
    await run;
    delete live[gated.id];
    assert.deepEqual(await finishedIds(sql, 'completed'), [gated.id]);
    await assertCountsMatchRows(t, sql, live);
  });

  it('skips a row another transaction has locked, without waiting for it, and deletes the rest', async () => {
    const expired = await insertHistory(sql, 'completed', '1 hour', 5);
    const holder = await connect(db.url);
    try {
      await holder.query('begin');
      await holder.query('select 1 from job_queue.finished_jobs where id = $1 for update', [expired[2]]);
      let timer: NodeJS.Timeout | undefined;
      const hung = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('the round waited for the row lock')), 15_000)));
      await Promise.race([maintenance.runOnce(), hung]).finally(() => clearTimeout(timer));
      assert.deepEqual(await finishedIds(sql, 'completed'), [expired[2]], 'the locked row is left, the others deleted');
      await holder.query('commit');
    } finally {
      await holder.end();
    }
    await maintenance.runOnce();
    assert.deepEqual(await finishedIds(sql, 'completed'), [], 'the next round deletes it');
    await assertCountsMatchRows(t, sql, {});
  });
});

/**
 * The default retention (completed 1d, failed 7d, cancelled 7d), in an app on default options
 * (JobQueueModule.forRoot()): the maintenance's cleanup, run by hand, deletes the finished jobs
 * past their state's retention and keeps the others.
 */
describe('retention by default', () => {
  let db: TestDatabase;
  let sql: Client;
  let app: INestApplicationContext;

  before(async () => {
    db = await createTestDatabase('lifecycle_default_retention');
    sql = await connect(db.url);
    @Module({ imports: [TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: JobQueueEntities }), JobQueueModule.forRoot()] })
    class DefaultsModule {}
    app = await NestFactory.createApplicationContext(DefaultsModule, { logger: false });
  });
  after(async () => {
    await app.close();
    await closeTestApp({ db, sql });
  });

  it('keeps completed jobs for a day, failed and cancelled ones for a week', async () => {
    const ages = ['23 hours', '25 hours', '6 days', '8 days'];
    const kept: Record<'completed' | 'failed' | 'cancelled', string[]> = {
      completed: ['23 hours'],
      failed: ['23 hours', '25 hours', '6 days'],
      cancelled: ['23 hours', '25 hours', '6 days'],
    };
    const expected: Record<string, string[]> = {};
    for (const state of ['completed', 'failed', 'cancelled'] as const) {
      expected[state] = [];
      for (const age of ages) {
        const [id] = await insertHistory(sql, state, age, 1);
        if (kept[state].includes(age)) expected[state].push(id);
      }
    }
    const maintenance = app.get(JobQueueMaintenance);
    await maintenance.runOnce();
    assert.equal(maintenance.isLeader, true, "the round was the leader's: it ran the cleanup");
    for (const state of ['completed', 'failed', 'cancelled'] as const) {
      assert.deepEqual(await finishedIds(sql, state), expected[state], `${state}: kept ${kept[state].join(', ')} old, deleted the older`);
    }
  });
});

/** retention.completed 0: a completed job is deleted as it completes; the other states keep their defaults. */
describe('retention.completed 0', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  const events: JobQueueEvent[] = [];

  before(async () => {
    ({ db, sql, t } = await openTestApp('lifecycle_no_history', { providers: [Tasks], jobQueue: { worker: false, retention: { completed: 0 } } }));
    t.worker.events$.subscribe((event) => events.push(event));
  });
  after(() => closeTestApp({ db, sql, t }));

  it('a completed job leaves no row at all; a failed one is kept', async () => {
    const [done, failed] = await t.jobs.addMany([{ identifier: 'quick', payload: { v: 5 } }, { identifier: 'boom', maxAttempts: 1 }]);
    await t.worker.runUntilIdle();
    const rows = async (id: string) =>
      (await sql.query('select (select count(*) from job_queue.jobs where id = $1)::int + (select count(*) from job_queue.finished_jobs where id = $1)::int as n', [id])).rows[0].n;
    assert.equal(await rows(done.id), 0, 'no row in jobs or finished_jobs');
    assert.equal(await t.jobs.getJob(done.id), null);
    const success = events.find((e) => e.type === 'job:success' && e.job.id === done.id);
    assert.deepEqual(success?.type === 'job:success' && success.result, { v: 5 }, 'it did complete');
    assert.equal((await t.jobs.getJob(failed.id))?.state, 'failed');
    assert.equal((await t.jobs.countJobs()).byState.completed, 0);
    assert.deepEqual((await sql.query(`select count(*)::int as n from job_queue.finished_counts where state = 'completed'`)).rows[0].n, 0);
  });
});

/**
 * Two replicas on one database, both running maintenance every 200 ms: the leader (one of
 * them) deletes the expired history in batches, once; nothing else changes.
 */
describe('retention with two replicas', () => {
  let db: TestDatabase;
  let sql: Client;
  let apps: TestApp[] = [];

  before(async () => {
    db = await createTestDatabase('lifecycle_retention_replicas');
    sql = await connect(db.url);
    const options = { worker: true, heartbeatInterval: 200, externalTasks: '*' as const, retention: { completed: '1s', failed: null, cancelled: 0 } };
    apps.push(await createTestApp({ url: db.url, jobQueue: options }));
    apps.push(await createTestApp({ url: db.url, jobQueue: options }));
    // every deletion from finished_jobs: by which connection, in which transaction, with the lease held by whom
    await sql.query(`create table deletions (id bigint not null, pid int not null, xid bigint not null, holder text)`);
    await sql.query(`
      create function log_deletion() returns trigger language plpgsql as $$
      begin
        insert into deletions values (old.id, pg_backend_pid(), txid_current(), (select holder from job_queue.leases where name = 'maintenance'));
        return null;
      end $$`);
    await sql.query('create trigger log_deletion after delete on job_queue.finished_jobs for each row execute function log_deletion()');
  });
  after(async () => {
    await Promise.all(apps.map((t) => t.close()));
    apps = [];
    await closeTestApp({ db, sql });
  });

  it('the leader alone deletes the expired rows, each once, in batches of at most 1,000', async () => {
    await sql.query('begin');
    const expired = [...(await insertHistory(sql, 'completed', '1 hour', 2_500)), ...(await insertHistory(sql, 'cancelled', '1 minute', 5))];
    const kept = await insertHistory(sql, 'failed', '30 days', 10);
    const live = await insertLiveJobs(sql);
    await sql.query('commit');
    const liveRows = await jobsSnapshot(sql);

    await waitForValue(sql, 'the expired rows to be deleted', `select count(*)::int from job_queue.finished_jobs where state <> 'failed'`, 0);
    const leaders = apps.filter((t) => t.app.get(JobQueueMaintenance).isLeader);
    assert.equal(leaders.length, 1, 'one replica leads');
    const { rows } = await sql.query(
      `select count(*)::int as n, count(distinct id)::int as ids, count(distinct pid)::int as connections, array_agg(distinct holder) as holders
       from deletions`,
    );
    assert.deepEqual(rows[0], { n: expired.length, ids: expired.length, connections: 1, holders: [leaders[0].worker.workerId] });
    const deleted = (await sql.query('select d.id::text from deletions d order by d.id')).rows.map((r) => r.id);
    assert.deepEqual(deleted, [...expired].sort((a, b) => Number(a) - Number(b)), 'exactly the expired rows');
    const batches = (await sql.query('select count(*)::int as n from deletions group by xid')).rows.map((r) => r.n);
    assert.ok(batches.length >= 3 && batches.every((n) => n <= 1_000), `deleted in batches of at most 1,000: ${batches}`);

    assert.deepEqual(await finishedIds(sql, 'failed'), kept);
    assert.deepEqual(await jobsSnapshot(sql), liveRows, 'no unfinished job was touched');
    await assertCountsMatchRows(apps[1], sql, live);
  });
});

/**
 * Job keys are unique among unfinished jobs only: a finished job (kept as history) frees its
 * key, in every jobKeyMode, from add() and from SQL's add_job alike.
 */
describe('job keys next to finished jobs', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    ({ db, sql, t } = await openTestApp('lifecycle_keys', { providers: [Tasks], jobQueue: { worker: false } }));
  });
  after(() => closeTestApp({ db, sql, t }));

  const finishedRow = async (id: string) => (await sql.query('select to_jsonb(f) as row from job_queue.finished_jobs f where id = $1', [id])).rows[0]?.row;
  const addBySql = async (key: string, mode: JobKeyMode, v: number) =>
    (await sql.query(`select id::text, key, revision, payload from job_queue.add_job('quick', $1::jsonb, job_key => $2, job_key_mode => $3)`, [{ v }, key, mode])).rows[0];

  /** A job with this key, run to completion or failure: its finished row. */
  async function finishedWithKey(key: string, mode: JobKeyMode, state: 'completed' | 'failed') {
    const job = await t.jobs.add(state === 'completed' ? 'quick' : 'boom', { v: 1 }, { jobKey: key, jobKeyMode: mode, maxAttempts: 1 });
    await t.worker.runUntilIdle();
    const row = await finishedRow(job.id);
    assert.equal(row?.state, state);
    return { id: job.id, row };
  }

  for (const mode of ['replace', 'preserve_run_at', 'unsafe_dedupe'] as const) {
    it(`${mode}: the key of a kept completed or failed job is free; once a new job holds it, ${mode} applies as before`, async () => {
      for (const state of ['completed', 'failed'] as const) {
        // add()
        const key = `${mode}-${state}`;
        const old = await finishedWithKey(key, mode, state);
        const runAt = new Date(Date.now() + 60_000);
        const fresh = await t.jobs.add('quick', { v: 2 }, { jobKey: key, jobKeyMode: mode, runAt });
        assert.notEqual(fresh.id, old.id, `${state}: a new job`);
        assert.deepEqual([fresh.key, fresh.revision, fresh.payload, fresh.state], [key, 0, { v: 2 }, 'scheduled']);
        assert.deepEqual(await finishedRow(old.id), old.row, `${state}: the finished row is untouched`);
        assert.equal((await t.jobs.getJob(old.id))?.state, state);

        // the key is held by an unfinished job again: the mode applies to it
        const later = new Date(Date.now() + 120_000);
        const again = await t.jobs.add('quick', { v: 3 }, { jobKey: key, jobKeyMode: mode, runAt: later });
        assert.equal(again.id, fresh.id, `${state}: the unfinished job is the one with the key`);
        const expected = {
          replace: { payload: { v: 3 }, revision: 1, runAt: later },
          preserve_run_at: { payload: { v: 3 }, revision: 1, runAt },
          unsafe_dedupe: { payload: { v: 2 }, revision: 0, runAt },
        }[mode];
        assert.deepEqual({ payload: again.payload, revision: again.revision, runAt: again.runAt }, expected, `${state}: ${mode} on the unfinished job`);

        // SQL add_job, against another finished job
        const sqlKey = `${mode}-${state}-sql`;
        const sqlOld = await finishedWithKey(sqlKey, mode, state);
        const added = await addBySql(sqlKey, mode, 2);
        assert.notEqual(added.id, sqlOld.id, `${state}: add_job adds a new job`);
        assert.deepEqual([added.key, added.revision, added.payload], [sqlKey, 0, { v: 2 }]);
        assert.deepEqual(await finishedRow(sqlOld.id), sqlOld.row);
        const sqlAgain = await addBySql(sqlKey, mode, 3);
        assert.equal(sqlAgain.id, added.id, `${state}: add_job finds the unfinished job with the key`);
        assert.deepEqual(sqlAgain.payload, mode === 'unsafe_dedupe' ? { v: 2 } : { v: 3 });

        // both generations end up in the history under the one key
        await t.jobs.rescheduleJobs([fresh.id], { runAt: new Date() });
        await t.worker.runUntilIdle();
        const history = await sql.query('select f.id::text, f.state from job_queue.finished_jobs f where f.key = $1 order by f.id', [key]);
        assert.deepEqual(history.rows, [{ id: old.id, state }, { id: fresh.id, state: 'completed' }]);
      }
    });
  }
});
