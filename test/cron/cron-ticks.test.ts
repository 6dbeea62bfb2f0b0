import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Cron, CronExpression, ScheduleModule } from '@nestjs/schedule';
import type { Client } from 'pg';
import { Task, type CronPayload, type JobContext, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { eventRecorder } from '../support/event-recorder';
import { terminateConnections } from '../support/connections';
import { connect, createTestDatabase, serverUrl } from '../support/database';
import { waitFor } from '../support/wait';

const handled: CronPayload[] = [];
let plainCronCalls = 0;

@Injectable()
class EverySecondTasks {
  @Task('every_second')
  @Cron(CronExpression.EVERY_SECOND)
  async tick(payload: CronPayload, _ctx: JobContext) {
    handled.push(payload);
  }
}

@Injectable()
class QueuedAndPlainCrons {
  @Cron('* * * * * *', { name: 'queued_second' })
  @Task('queued_tick')
  async queued(payload: CronPayload) {
    handled.push(payload);
  }

  /** No @Task: @nestjs/schedule runs it, in every replica, as usual. */
  @Cron('* * * * * *')
  plain() {
    plainCronCalls++;
  }
}

describe('cron: one job per tick across replicas', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('cron_ticks');
    sql = await connect(db.url);
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  const tickTimes = async (task: string) =>
    (await sql.query(`select payload->'_cron'->>'ts' as ts, payload->'_cron'->>'backfilled' as backfilled from job_queue.jobs where task_identifier = $1 order by 1`, [task])).rows;
  /** Resolves when a tick of `task` later than `after` (ms) has been added. */
  const tickAfter = (task: string, after: number, what: string) =>
    waitFor(what, async () => (await tickTimes(task)).some((r) => Date.parse(r.ts) > after));
  const ticksAdded = (task: string, count: number) =>
    waitFor(`${count} ticks of ${task}`, async () => (await tickTimes(task)).length >= count);
  /** Runs `body`, then closes the apps whatever happened: a failed wait must not leave schedulers running. */
  const closingAfter = async (apps: TestApp[], body: () => Promise<void>) => {
    try {
      await body();
    } finally {
      await Promise.all(apps.map((t) => t.close()));
    }
  };

  it('three instances with an every-second cron add exactly one job per tick, with no gaps', async () => {
    const events: JobQueueEvent[] = [];
    const apps: TestApp[] = await Promise.all(
      [1, 2, 3].map(() => createTestApp({ url: db.url, providers: [EverySecondTasks, eventRecorder(events)], jobQueue: { worker: false } })),
    );
    await closingAfter(apps, () => ticksAdded('every_second', 4));

    const rows = await tickTimes('every_second');
    const times = rows.map((r) => Date.parse(r.ts));
    assert.equal(new Set(times).size, times.length, 'one job per tick');
    for (let i = 1; i < times.length; i++) assert.equal(times[i] - times[i - 1], 1000, 'consecutive ticks, no gap');
    assert.ok(times.every((t) => t % 1000 === 0));
    assert.ok(rows.every((r) => r.backfilled === 'false'));
    const scheduled = events.filter((e) => e.type === 'cron:schedule');
    assert.equal(scheduled.length, rows.length, 'one cron:schedule event per tick, from whichever replica added it');
    const known = (await sql.query(`select identifier, last_execution from job_queue.known_crontabs where identifier = 'every_second'`)).rows;
    assert.equal(known[0].last_execution.getTime(), times[times.length - 1]);
  });

  it('with ScheduleModule imported too, the task runs once per tick (not once per replica), and plain @Cron still runs', async () => {
    handled.length = 0;
    const apps = await Promise.all(
      [1, 2, 3].map(() => createTestApp({ url: db.url, providers: [QueuedAndPlainCrons], imports: [ScheduleModule.forRoot()] })),
    );
    await closingAfter(apps, () => waitFor('three queued ticks handled and three plain @Cron calls', () => handled.length >= 3 && plainCronCalls >= 3));

    assert.ok(handled.every((p) => p && typeof p._cron?.ts === 'string'), 'every call came from a queued job, none from ScheduleModule directly');
    const ts = handled.map((p) => p._cron.ts);
    assert.equal(new Set(ts).size, ts.length, 'each tick handled once');
  });

  it('resumes after a database outage, still one job per tick, none dropped', async () => {
    await sql.query(`delete from job_queue.jobs where task_identifier = 'every_second'`);
    const events: JobQueueEvent[] = [];
    const t = await createTestApp({ url: db.url, providers: [EverySecondTasks, eventRecorder(events)], jobQueue: { worker: false } });
    await closingAfter([t], async () => {
      await ticksAdded('every_second', 1);
      // an outage, not just killed connections (which the pool replaces at once): no new
      // connection is allowed until the scheduler has failed to add a tick
      const admin = await connect(serverUrl());
      try {
        await admin.query(`alter database "${db.name}" allow_connections false`);
        assert.ok((await terminateConnections(sql)) > 0, 'the app had connections to kill');
        await waitFor('the scheduler to fail to add a tick', () => events.some((e) => e.type === 'worker:error' && e.during === 'cron'));
      } finally {
        await admin.query(`alter database "${db.name}" allow_connections true`);
        await admin.end();
      }
      await tickAfter('every_second', Date.now() + 1000, 'a tick after the outage');
    });
    const times = (await tickTimes('every_second')).map((r) => Date.parse(r.ts));
    assert.equal(new Set(times).size, times.length, 'no tick twice');
    for (let i = 1; i < times.length; i++) assert.equal(times[i] - times[i - 1], 1000, 'a short outage delays ticks, drops none');
  });

  it('a stalled event loop adds the ticks it owed late, none dropped, none twice', async () => {
    await sql.query(`delete from job_queue.jobs where task_identifier = 'every_second'`);
    const t = await createTestApp({ url: db.url, providers: [EverySecondTasks], jobQueue: { worker: false } });
    await closingAfter([t], async () => {
      await ticksAdded('every_second', 1);
      const stalledUntil = Date.now() + 2500;
      while (Date.now() < stalledUntil); // a synchronous stall: no timer fires meanwhile
      await tickAfter('every_second', stalledUntil, 'a tick after the stall');
    });
    const times = (await tickTimes('every_second')).map((r) => Date.parse(r.ts));
    for (let i = 1; i < times.length; i++) assert.equal(times[i] - times[i - 1], 1000, 'consecutive ticks, no gap');
  });

  it('a time-zone schedule fires at the right UTC instant (timeZone and utcOffset)', async () => {
    // A tick a few seconds ahead, written in Kathmandu local time (UTC+05:45). If the app
    // took so long to boot that the tick passed first (a loaded machine), try a later one.
    for (let attempt = 1; ; attempt++) {
      const target = new Date(Math.ceil((Date.now() + 3000) / 1000) * 1000);
      const local = new Date(target.getTime() + (5 * 60 + 45) * 60_000);
      const expression = `${local.getUTCSeconds()} ${local.getUTCMinutes()} ${local.getUTCHours()} * * *`;

      @Injectable()
      class ZonedTasks {
        @Task('zoned')
        @Cron(expression, { name: 'zoned_tz', timeZone: 'Asia/Kathmandu' })
        async zoned() {}

        @Task('offset')
        @Cron(expression, { name: 'zoned_offset', utcOffset: 345 })
        async offset() {}
      }
      const events: JobQueueEvent[] = [];
      const t = await createTestApp({ url: db.url, providers: [ZonedTasks, eventRecorder(events)], jobQueue: { worker: false } });
      if (Date.now() > target.getTime() - 200) {
        await t.close();
        // a tick added while it closed would answer for the next target: start clean
        await sql.query(`delete from job_queue.jobs where task_identifier in ('zoned', 'offset')`);
        if (attempt === 5) assert.fail(`five boots in a row took longer than the ~3 s to their tick`);
        continue;
      }
      let seen = '';
      try {
        await waitFor(
          () => `the zoned ticks at ${target.toISOString()} (attempt ${attempt}; last saw ${seen})`,
          async () => {
            const [zoned, offset] = [await tickTimes('zoned'), await tickTimes('offset')];
            seen = JSON.stringify({ zoned, offset, now: new Date(), events });
            return zoned.length > 0 && offset.length > 0;
          },
        );
      } finally {
        await t.close(); // stops the scheduler: whatever it added is in the table now
      }

      assert.deepEqual((await tickTimes('zoned')).map((r) => r.ts), [target.toISOString()]);
      assert.deepEqual((await tickTimes('offset')).map((r) => r.ts), [target.toISOString()]);
      return;
    }
  });
});
