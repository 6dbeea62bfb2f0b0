import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import type { Client } from 'pg';
import { Task, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp } from '../support/app';
import { eventRecorder } from '../support/event-recorder';
import { connect, createTestDatabase } from '../support/database';

const minute = 60_000;
const hour = 60 * minute;

describe('cron backfill after downtime', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('cron_backfill');
    sql = await connect(db.url);
    // make the tables, so that the test can pretend some schedules were known before
    const first = await createTestApp({ url: db.url, jobQueue: { worker: false } });
    await first.close();
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  it('adds the missed ticks once, oldest first, marked backfilled, for known schedules only', async () => {
    // Hourly schedules at the minute half an hour from now (UTC): the latest tick was 30-31
    // minutes ago and the next one is 29-30 minutes away, so no live tick lands during the
    // test however slowly the apps boot (a live tick would show as a job not marked backfilled).
    const now = new Date();
    const atMinute = (now.getUTCMinutes() + 30) % 60;
    const expression = `${atMinute} * * * *`;
    const latestTick = new Date(Math.floor(now.getTime() / minute) * minute - 30 * minute);
    // the schedules last ran ten hours ago: ten ticks missed since
    const lastExecution = new Date(latestTick.getTime() - 10 * hour);

    @Injectable()
    class ReportTasks {
      @Task('hourly_report', { backfillPeriod: '1d', payload: { kind: 'report' }, queueName: 'reports', priority: 3, maxAttempts: 2 })
      @Cron(expression, { timeZone: 'UTC' })
      async report() {}

      // unknown before this boot: the same period of backfill must add nothing for it
      @Task('brand_new', { backfillPeriod: '1d' })
      @Cron(expression, { timeZone: 'UTC' })
      async brandNew() {}

      @Task('from_crontab')
      async fromCrontab() {}
    }

    await sql.query(
      `insert into job_queue.known_crontabs (identifier, known_since, last_execution)
       values ('hourly_report', now() - interval '2 days', $1), ('crontab_fill', now() - interval '2 days', $1)`,
      [lastExecution],
    );

    // three replicas come back at once
    const events: JobQueueEvent[] = [];
    const apps = await Promise.all(
      [1, 2, 3].map(() =>
        createTestApp({
          url: db.url,
          providers: [ReportTasks, eventRecorder(events)],
          // crontab lines are in UTC; fill=5h reaches back to four and a half hours before the latest tick
          jobQueue: { worker: false, crontab: `# a comment\n${expression} from_crontab ?id=crontab_fill&fill=5h&max=4 {source: 'crontab',}\n` /* JSON5, as graphile-worker reads it */ },
        }),
      ),
    );
    await Promise.all(apps.map((t) => t.close()));

    const rows = (
      await sql.query(
        `select task_identifier as task, payload, queue_name, priority, max_attempts, run_at
         from job_queue.jobs order by task_identifier, id`,
      )
    ).rows;
    const report = rows.filter((r) => r.task === 'hourly_report');
    const expected = Array.from({ length: 10 }, (_, i) => new Date(lastExecution.getTime() + (i + 1) * hour).toISOString());
    assert.deepEqual(report.map((r) => r.payload._cron.ts), expected, 'each missed tick once, oldest first');
    assert.ok(report.every((r) => r.payload._cron.backfilled === true && r.payload.kind === 'report'));
    assert.ok(report.every((r) => r.queue_name === 'reports' && r.priority === 3 && r.max_attempts === 2));
    assert.deepEqual(report.map((r) => r.run_at.toISOString()), expected);

    const crontab = rows.filter((r) => r.task === 'from_crontab');
    assert.deepEqual(crontab.map((r) => r.payload._cron.ts), expected.slice(-5), 'fill=5h reaches back five ticks');
    assert.ok(crontab.every((r) => r.payload._cron.backfilled === true && r.payload.source === 'crontab' && r.max_attempts === 4));

    assert.equal(rows.filter((r) => r.task === 'brand_new').length, 0, 'a new schedule has nothing to backfill');
    const backfillEvents = events.filter((e) => e.type === 'cron:schedule' && e.identifier === 'hourly_report' && e.backfilled);
    assert.deepEqual(
      backfillEvents.map((e) => e.type === 'cron:schedule' && e.ts.toISOString()),
      expected,
      'one cron:schedule event per backfilled tick, from whichever replica added it',
    );
    const known = (await sql.query(`select identifier from job_queue.known_crontabs order by 1`)).rows.map((r) => r.identifier);
    assert.deepEqual(known, ['brand_new', 'crontab_fill', 'hourly_report']);
  });
});
