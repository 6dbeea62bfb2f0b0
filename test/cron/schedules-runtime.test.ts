import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { isJobQueueError, type JobQueueService } from '../../libs/job-queue/src';
import { createTestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { distinctTicks, tickJobs, ticksAfter } from '../support/schedule-ticks';
import { startWorkerProcesses, stopWorkerProcesses } from '../support/worker-processes';
import { waitFor } from '../support/wait';

/**
 * Schedules given at run time (upsertSchedule) while two worker processes run (their
 * pollInterval is 200 ms): each change is made by a short-lived app that then closes, so every
 * tick below was added by one of the two processes, which learnt of the change by reading the
 * table. `record` jobs record their runs in `runs`.
 */
describe('schedules at run time, across two processes', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('schedules_runtime');
    sql = await connect(db.url);
    await sql.query('create table runs (job_id bigint not null, pid int not null, attempt int not null)');
    await startWorkerProcesses(2, { url: db.url });
  });
  after(async () => {
    await stopWorkerProcesses();
    await sql.end();
    await db.drop();
  });

  /** Calls the service of an app that closes right after: it never ticks anything itself. */
  async function admin<T>(call: (jobs: JobQueueService) => Promise<T>): Promise<T> {
    const t = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: ['record'] } });
    try {
      return await call(t.jobs);
    } finally {
      await t.close();
    }
  }

  /** Each tick job of `id` ran once. */
  async function ranOnce(id: string): Promise<void> {
    const ticks = await tickJobs(sql, id);
    await waitFor(`the ${ticks.length} jobs of ${id} to run`, async () => (await sql.query('select count(distinct job_id)::int as n from runs where job_id = any($1::bigint[])', [ticks.map((t) => t.id)])).rows[0].n === ticks.length);
    const { rows } = await sql.query('select job_id::text, count(*)::int as n from runs where job_id = any($1::bigint[]) group by 1 having count(*) > 1', [ticks.map((t) => t.id)]);
    assert.deepEqual(rows, [], `no job of ${id} ran twice`);
  }

  it('a new schedule ticks within a second of upsertSchedule, one job per tick, and an update changes the next ticks', async () => {
    const created = await admin((jobs) => jobs.upsertSchedule('heartbeat', { every: '1s', identifier: 'record', payload: { v: 1 } }));
    assert.equal(created.declaredInCode, false);
    assert.equal(created.every, 1000);
    const since = created.updatedAt!.getTime();
    const first = await ticksAfter(sql, 'heartbeat', since, 4);
    assert.ok(first[0].ts <= since + 1_000, `the first tick is the first whole second after the upsert: ${new Date(first[0].ts).toISOString()}`);
    for (const tick of first) assert.ok(tick.createdAt - tick.ts < 1_000, `tick ${new Date(tick.ts).toISOString()} added ${tick.createdAt - tick.ts} ms after it was due`);
    for (let i = 1; i < first.length; i++) assert.equal(first[i].ts - first[i - 1].ts, 1_000, 'every second, no gap');
    assert.ok(distinctTicks(await tickJobs(sql, 'heartbeat')), 'one job per tick');

    // every 3 s from now on, with another payload
    const updated = await admin((jobs) => jobs.upsertSchedule('heartbeat', { every: '3s', identifier: 'record', payload: { v: 2 } }));
    const changedAt = updated.updatedAt!.getTime();
    assert.ok(changedAt > since);
    await ticksAfter(sql, 'heartbeat', changedAt, 3);
    const { rows } = await sql.query(
      `select payload->'_cron'->>'ts' as ts, payload->>'v' as v from (select payload, key from job_queue.jobs union all select payload, key from job_queue.finished_jobs) j
       where key like 'cron:heartbeat:%' and (payload->'_cron'->>'ts')::timestamptz > $1 order by 1`,
      [updated.updatedAt],
    );
    assert.ok(rows.every((r) => Date.parse(r.ts) % 3_000 === 0 && r.v === '2'), `after the update, only the new schedule ticks: ${JSON.stringify(rows)}`);
    assert.ok(distinctTicks(await tickJobs(sql, 'heartbeat')));
    await ranOnce('heartbeat');
  });

  it('pauseSchedule stops the ticks in both processes, resumeSchedule starts them again without the paused ones; removeSchedule stops them for good', async () => {
    // a second schedule, the positive sign that time passed in the processes
    await admin((jobs) => jobs.upsertSchedule('marker', { every: '1s', identifier: 'record' }));
    await admin((jobs) => jobs.upsertSchedule('heartbeat', { every: '1s', identifier: 'record', payload: { v: 3 } }));
    const listed = await admin((jobs) => jobs.listSchedules());
    assert.deepEqual(listed.map((s) => [s.id, s.declaredInCode, s.paused, s.every]), [['heartbeat', false, false, 1000], ['marker', false, false, 1000]]);
    assert.ok(listed.every((s) => s.nextTick && s.nextTick.getTime() % 1000 === 0));

    const paused = await admin((jobs) => jobs.pauseSchedule('heartbeat'));
    assert.equal(paused.paused, true);
    assert.equal(paused.nextTick, null, 'a paused schedule has no next tick');
    const pausedAt = paused.pausedAt!.getTime();
    await ticksAfter(sql, 'marker', pausedAt + 1_000, 3, ' (three seconds of pause)');
    const beforeResume = Date.now();
    const resumed = await admin((jobs) => jobs.resumeSchedule('heartbeat'));
    assert.equal(resumed.paused, false);
    await ticksAfter(sql, 'heartbeat', Date.now(), 2, ' (after the resume)');
    // (a tick claimed while the pause's own statement ran may come a few ms after its now())
    assert.deepEqual((await tickJobs(sql, 'heartbeat')).filter((t) => t.ts > pausedAt + 50 && t.ts <= beforeResume), [], 'no tick of the pause, then or late');

    assert.equal(await admin((jobs) => jobs.removeSchedule('heartbeat')), true);
    const removedAt = Date.now();
    await ticksAfter(sql, 'marker', removedAt + 1_000, 3, ' (three seconds after the removal)');
    assert.deepEqual((await tickJobs(sql, 'heartbeat')).filter((t) => t.ts > removedAt + 1_000), [], 'no tick after the removal');
    assert.equal(await admin((jobs) => jobs.removeSchedule('heartbeat')), false, 'removing it again removes nothing');
    await assert.rejects(admin((jobs) => jobs.pauseSchedule('heartbeat')), (error) => isJobQueueError(error, 'JQ_SCHEDULE_NOT_FOUND'));
    assert.deepEqual((await admin((jobs) => jobs.listSchedules())).map((s) => s.id), ['marker']);
    assert.equal((await sql.query(`select count(*)::int as n from job_queue.known_crontabs where identifier = 'heartbeat'`)).rows[0].n, 0, 'no process wrote the row back');
    assert.ok(distinctTicks(await tickJobs(sql, 'heartbeat')) && distinctTicks(await tickJobs(sql, 'marker')), 'one job per tick');
    await ranOnce('heartbeat');
    await ranOnce('marker');
  });
});
