import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import type { Client } from 'pg';
import { isJobQueueError, Task, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { eventRecorder } from '../support/event-recorder';
import { connect, createTestDatabase } from '../support/database';
import { distinctTicks, tickJobs, ticksAfter } from '../support/schedule-ticks';

@Injectable()
class DeclaredTasks {
  @Task('nightly_report')
  @Cron('0 3 * * *', { name: 'nightly', timeZone: 'Europe/Paris' })
  async nightly() {}

  @Task('every_second')
  @Cron('* * * * * *', { timeZone: 'UTC' })
  async everySecond() {}

  @Task('from_crontab')
  async fromCrontab() {}
}

/** The deploy before: `deploy_tick` on even seconds. */
@Injectable()
class EvenDeploy {
  @Task('deploy_tick')
  @Cron('0-58/2 * * * * *', { timeZone: 'UTC' })
  async tick() {}
}

/** The deploy after: the same schedule on odd seconds. */
@Injectable()
class OddDeploy {
  @Task('deploy_tick')
  @Cron('1-59/2 * * * * *', { timeZone: 'UTC' })
  async tick() {}
}

/**
 * Schedules declared in code (`@Cron`, crontab) in the stored list: listed as such, never
 * removed or changed at run time, but paused in every replica; and the stored declaration is
 * what every replica ticks, so that a replica of the previous deploy stops ticking its old
 * expression once the new one is stored.
 */
describe('schedules declared in code', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  const apps: TestApp[] = [];

  before(async () => {
    db = await createTestDatabase('schedules_declared');
    sql = await connect(db.url);
  });
  after(async () => {
    await Promise.all(apps.map((t) => t.close()));
    await sql.end();
    await db.drop();
  });

  const start = async (providers: Array<new (...args: never[]) => unknown>, crontab?: string) => {
    const t = await createTestApp({ url: db.url, providers, jobQueue: { worker: false, pollInterval: 200, crontab } });
    apps.push(t);
    return t;
  };
  const close = async (t: TestApp) => {
    apps.splice(apps.indexOf(t), 1);
    await t.close();
  };

  it('are listed as declared in code beside run-time ones; they cannot be removed or upserted, but they pause and resume in every replica', async () => {
    const [a, b] = await Promise.all([start([DeclaredTasks], '0 4 * * * from_crontab ?id=crontab_line'), start([DeclaredTasks], '0 4 * * * from_crontab ?id=crontab_line')]);
    await a.jobs.upsertSchedule('runtime_one', { cron: '0 5 * * *', timeZone: 'America/New_York', identifier: 'from_crontab', payload: { n: 1 } });
    const listed = await b.jobs.listSchedules();
    assert.deepEqual(
      listed.map((s) => [s.id, s.identifier, s.cron, s.timeZone, s.declaredInCode]),
      [
        ['crontab_line', 'from_crontab', '0 4 * * *', 'UTC', true],
        ['every_second', 'every_second', '* * * * * *', 'UTC', true],
        ['nightly', 'nightly_report', '0 3 * * *', 'Europe/Paris', true],
        ['runtime_one', 'from_crontab', '0 5 * * *', 'America/New_York', false],
      ],
    );
    const nightly = listed.find((s) => s.id === 'nightly')!;
    assert.equal(new Intl.DateTimeFormat('en-GB', { timeZone: 'Europe/Paris', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(nightly.nextTick!), '03:00');
    assert.deepEqual(listed.find((s) => s.id === 'runtime_one')!.payload, { n: 1 });

    for (const id of ['nightly', 'crontab_line']) {
      await assert.rejects(a.jobs.removeSchedule(id), (error) => isJobQueueError(error, 'JQ_SCHEDULE_DECLARED_IN_CODE') && /can be paused/.test(error.message));
      await assert.rejects(a.jobs.upsertSchedule(id, { every: '1s', identifier: 'from_crontab' }), (error) => isJobQueueError(error, 'JQ_SCHEDULE_DECLARED_IN_CODE'));
    }
    assert.equal((await a.jobs.listSchedules()).find((s) => s.id === 'nightly')!.cron, '0 3 * * *', 'unchanged');

    // every_second ticks in both replicas; paused, neither adds a tick; resumed, they go on
    const paused = await a.jobs.pauseSchedule('every_second');
    assert.equal(paused.declaredInCode, true);
    assert.equal(paused.paused, true);
    await a.jobs.upsertSchedule('marker', { every: '1s', identifier: 'every_second' });
    await ticksAfter(sql, 'marker', paused.pausedAt!.getTime() + 1_000, 3, ' (three seconds of pause)');
    const beforeResume = Date.now();
    await b.jobs.resumeSchedule('every_second');
    await ticksAfter(sql, 'every_second', Date.now(), 2, ' (after the resume)');
    const ticks = await tickJobs(sql, 'every_second');
    assert.deepEqual(ticks.filter((t) => t.ts > paused.pausedAt!.getTime() + 50 && t.ts <= beforeResume), [], 'no tick of the pause');
    assert.ok(distinctTicks(ticks), 'one job per tick');
    assert.equal((await a.jobs.listSchedules()).find((s) => s.id === 'every_second')!.paused, false);
    await a.jobs.removeSchedule('marker');
    await Promise.all([close(a), close(b)]);
  });

  it("a replica of the previous deploy ticks the new deploy's expression once it is stored, not its own", async () => {
    const events: JobQueueEvent[] = [];
    const old = await start([EvenDeploy, eventRecorder(events)]);
    const even = await ticksAfter(sql, 'deploy_tick', 0, 2, ' (the old deploy, even seconds)');
    assert.ok(even.every((t) => (t.ts / 1000) % 2 === 0));

    // a replica of the new deploy starts, declares odd seconds, and goes away again: only the old replica is left
    const next = await start([OddDeploy]);
    await close(next);
    const [row] = (await sql.query(`select expression, updated_at from job_queue.known_crontabs where identifier = 'deploy_tick'`)).rows;
    assert.equal(row.expression, '1-59/2 * * * * *', 'the newest start wins');
    const storedAt = (row.updated_at as Date).getTime();

    const after = await ticksAfter(sql, 'deploy_tick', storedAt, 3, ' (after the new declaration)');
    assert.ok(after.every((t) => (t.ts / 1000) % 2 === 1), `only odd seconds after the new declaration: ${after.map((t) => new Date(t.ts).toISOString())}`);
    const byOld = events.filter((e) => e.type === 'cron:schedule' && e.identifier === 'deploy_tick' && e.ts.getTime() > storedAt);
    assert.ok(byOld.length >= 3, 'the old replica added them');
    assert.ok(distinctTicks(await tickJobs(sql, 'deploy_tick')), 'one job per tick');
    const listed = (await old.jobs.listSchedules()).find((s) => s.id === 'deploy_tick')!;
    assert.equal(listed.cron, '1-59/2 * * * * *');
    await close(old);
  });
});
