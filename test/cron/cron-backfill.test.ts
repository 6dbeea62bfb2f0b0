import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import type { Client } from 'pg';
import { Task, type JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp } from '../support/app';
import { eventRecorder } from '../support/event-recorder';
import { connect, createTestDatabase } from '../support/database';

@Injectable()
class ReportTasks {
  @Task('minute_report', { backfillPeriod: '1h', payload: { kind: 'report' }, queueName: 'reports', priority: 3, maxAttempts: 2 })
  @Cron('* * * * *', { timeZone: 'UTC' })
  async report() {}

  @Task('brand_new', { backfillPeriod: '1h' })
  @Cron('* * * * *', { timeZone: 'UTC' })
  async brandNew() {}

  @Task('from_crontab')
  async fromCrontab() {}
}

const minute = 60_000;
const events: JobQueueEvent[] = [];

describe('cron backfill after downtime', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('cron_backfill');
    sql = await connect(db.url);
    // make the tables, then pretend the schedules were known and last ran 10 minutes ago
    const first = await createTestApp({ url: db.url, jobQueue: { worker: false } });
    await first.close();
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  it('adds the missed ticks once, oldest first, marked backfilled, for known schedules only', async () => {
    // a moment comfortably inside a minute, so no live tick lands during the test
    const secondsLeft = 60 - new Date().getUTCSeconds();
    if (secondsLeft < 15) await new Promise((resolve) => setTimeout(resolve, secondsLeft * 1000 + 500));
    const lastMinute = Math.floor(Date.now() / minute) * minute;
    const lastExecution = new Date(lastMinute - 10 * minute);
    await sql.query(
      `insert into job_queue.known_crontabs (identifier, known_since, last_execution)
       values ('minute_report', now() - interval '1 day', $1), ('crontab_fill', now() - interval '1 day', $1)`,
      [lastExecution],
    );

    // three replicas come back at once
    const apps = await Promise.all(
      [1, 2, 3].map(() =>
        createTestApp({
          url: db.url,
          providers: [ReportTasks, eventRecorder(events)],
          jobQueue: { worker: false, crontab: '# a comment\n* * * * * from_crontab ?id=crontab_fill&fill=5m&max=4 {"source":"crontab"}\n' },
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
    const report = rows.filter((r) => r.task === 'minute_report');
    const expected = Array.from({ length: 10 }, (_, i) => new Date(lastExecution.getTime() + (i + 1) * minute).toISOString());
    assert.deepEqual(report.map((r) => r.payload._cron.ts), expected, 'each missed minute once, oldest first');
    assert.ok(report.every((r) => r.payload._cron.backfilled === true && r.payload.kind === 'report'));
    assert.ok(report.every((r) => r.queue_name === 'reports' && r.priority === 3 && r.max_attempts === 2));
    assert.deepEqual(report.map((r) => r.run_at.toISOString()), expected);

    const crontab = rows.filter((r) => r.task === 'from_crontab');
    assert.deepEqual(crontab.map((r) => r.payload._cron.ts), expected.slice(-5), 'fill=5m reaches back five minutes');
    assert.ok(crontab.every((r) => r.payload.source === 'crontab' && r.max_attempts === 4));

    assert.equal(rows.filter((r) => r.task === 'brand_new').length, 0, 'a new schedule has nothing to backfill');
    const backfillEvents = events.filter((e) => e.type === 'cron:schedule' && e.identifier === 'minute_report' && e.backfilled);
    assert.deepEqual(
      backfillEvents.map((e) => e.type === 'cron:schedule' && e.ts.toISOString()),
      expected,
      'one cron:schedule event per backfilled tick, from whichever replica added it',
    );
    const known = (await sql.query(`select identifier from job_queue.known_crontabs order by 1`)).rows.map((r) => r.identifier);
    assert.deepEqual(known, ['brand_new', 'crontab_fill', 'minute_report']);
  });
});
