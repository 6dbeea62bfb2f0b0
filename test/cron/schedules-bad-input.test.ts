import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { isJobQueueError, KnownCrontabEntity, Task, type JobQueueErrorCode, type ScheduleSpec } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';

@Injectable()
class ReportTasks {
  @Task('report')
  async report() {}
}

/** upsertSchedule and the other schedule calls refuse bad input with a stable code, before anything is written. */
describe('schedules: bad input', () => {
  let ctx: TestAppContext;
  const rows = async () => (await ctx.sql.query('select * from job_queue.known_crontabs order by identifier')).rows;

  before(async () => {
    ctx = await openTestApp('schedules_bad_input', { providers: [ReportTasks], jobQueue: { worker: false } });
    await ctx.t.jobs.upsertSchedule('kept', { cron: '0 3 * * *', identifier: 'report', payload: { n: 1 } });
  });
  after(() => closeTestApp(ctx));

  const good: ScheduleSpec = { cron: '0 3 * * *', identifier: 'report' };
  const cases: Array<[string, unknown, unknown, JobQueueErrorCode, RegExp?]> = [
    ['cron and every', 'kept', { ...good, every: '1h' }, 'JQ_INVALID_SCHEDULE', /either cron .* or every/],
    ['neither cron nor every', 'kept', { identifier: 'report' }, 'JQ_INVALID_SCHEDULE', /either cron/],
    ['every in words', 'kept', { every: 'hourly', identifier: 'report' }, 'JQ_INVALID_SCHEDULE', /every must be/],
    ['every under a second', 'kept', { every: 500, identifier: 'report' }, 'JQ_INVALID_SCHEDULE', /every must be/],
    ['every of zero', 'kept', { every: '0s', identifier: 'report' }, 'JQ_INVALID_SCHEDULE'],
    ['every negative', 'kept', { every: -1_000, identifier: 'report' }, 'JQ_INVALID_SCHEDULE'],
    ['every fractional', 'kept', { every: 1_500.5, identifier: 'report' }, 'JQ_INVALID_SCHEDULE'],
    ['every over a year', 'kept', { every: '400d', identifier: 'report' }, 'JQ_INVALID_SCHEDULE'],
    ['every with a time zone', 'kept', { every: '1h', timeZone: 'Europe/Paris', identifier: 'report' }, 'JQ_INVALID_SCHEDULE', /timeZone applies to a cron/],
    ['a bad cron expression', 'kept', { ...good, cron: 'every day at 3' }, 'JQ_INVALID_CRON_EXPRESSION', /schedule 'kept'/],
    ['a cron expression out of range', 'kept', { ...good, cron: '0 25 * * *' }, 'JQ_INVALID_CRON_EXPRESSION'],
    ['a cron expression that is not a string', 'kept', { ...good, cron: 3 }, 'JQ_INVALID_CRON_EXPRESSION'],
    ['an unknown time zone', 'kept', { ...good, timeZone: 'Mars/Olympus_Mons' }, 'JQ_INVALID_TIME_ZONE', /Mars/],
    ['a time zone that is not a string', 'kept', { ...good, timeZone: 60 }, 'JQ_INVALID_TIME_ZONE'],
    ['an unknown task', 'kept', { ...good, identifier: 'reprot' }, 'JQ_UNKNOWN_TASK', /reprot/],
    ['no task', 'kept', { cron: '0 3 * * *' }, 'JQ_INVALID_TASK_IDENTIFIER'],
    ['an empty id', '', good, 'JQ_INVALID_SCHEDULE', /schedule id/],
    ['an id that is not a string', 42, good, 'JQ_INVALID_SCHEDULE', /schedule id/],
    ['an id too long', 'x'.repeat(129), good, 'JQ_INVALID_SCHEDULE', /128/],
    ['an id with a newline', 'a\nb', good, 'JQ_INVALID_SCHEDULE', /control/],
    ['a payload that is an array', 'kept', { ...good, payload: [1] }, 'JQ_INVALID_SCHEDULE', /payload/],
    ['a payload that is a string', 'kept', { ...good, payload: 'x' }, 'JQ_INVALID_SCHEDULE', /payload/],
    ['a payload that is a Date', 'kept', { ...good, payload: new Date() }, 'JQ_INVALID_SCHEDULE', /payload/],
    ['a payload with _cron', 'kept', { ...good, payload: { _cron: 1 } }, 'JQ_INVALID_SCHEDULE', /_cron/],
    ['a payload JSON cannot carry', 'kept', { ...good, payload: { n: 1n } }, 'JQ_INVALID_PAYLOAD'],
    ['an empty queue name', 'kept', { ...good, queueName: '' }, 'JQ_INVALID_QUEUE_NAME'],
    ['a fractional priority', 'kept', { ...good, priority: 1.5 }, 'JQ_INVALID_PRIORITY'],
    ['a bad backfill period', 'kept', { ...good, backfillPeriod: 'forever' }, 'JQ_INVALID_SCHEDULE', /backfillPeriod/],
    ['an unknown option', 'kept', { ...good, crom: '* * * * *' }, 'JQ_INVALID_SCHEDULE', /unknown option\(s\) crom/],
    ['no spec', 'kept', null, 'JQ_INVALID_SCHEDULE'],
  ];

  it('upsertSchedule refuses each with its code, and writes nothing', async () => {
    const before = await rows();
    for (const [what, id, spec, code, message] of cases) {
      await assert.rejects(
        ctx.t.jobs.upsertSchedule(id as string, spec as ScheduleSpec),
        (error) => isJobQueueError(error, code) && (!message || message.test(error.message)),
        `${what}: ${code}`,
      );
    }
    assert.deepEqual(await rows(), before, 'no schedule added or changed');
  });

  it('remove, pause and resume refuse a bad id, and an unknown one', async () => {
    const before = await rows();
    for (const call of [(id: string) => ctx.t.jobs.removeSchedule(id), (id: string) => ctx.t.jobs.pauseSchedule(id), (id: string) => ctx.t.jobs.resumeSchedule(id)]) {
      for (const id of ['', 7, 'x'.repeat(129)]) await assert.rejects(call(id as string), (error) => isJobQueueError(error, 'JQ_INVALID_SCHEDULE'));
    }
    await assert.rejects(ctx.t.jobs.pauseSchedule('nope'), (error) => isJobQueueError(error, 'JQ_SCHEDULE_NOT_FOUND'));
    await assert.rejects(ctx.t.jobs.resumeSchedule('nope'), (error) => isJobQueueError(error, 'JQ_SCHEDULE_NOT_FOUND'));
    assert.equal(await ctx.t.jobs.removeSchedule('nope'), false);
    assert.deepEqual(await rows(), before);
  });

  it('the same definition upserted again changes nothing; a new one raises the revision', async () => {
    const [first] = await rows();
    await ctx.t.jobs.upsertSchedule('kept', { cron: '0 3 * * *', identifier: 'report', payload: { n: 1 } });
    const [same] = await rows();
    assert.equal(same.revision, first.revision);
    assert.deepEqual(same.updated_at, first.updated_at);
    await ctx.t.jobs.upsertSchedule('kept', { every: '1h', identifier: 'report', payload: { n: 1 } });
    const [changed] = await rows();
    assert.equal(Number(changed.revision), Number(first.revision) + 1);
    assert.deepEqual([changed.expression, changed.every_ms, changed.time_zone], [null, '3600000', null]);
    // the entity users query with a repository has the schedule's columns
    const entity = await ctx.t.app.get(DataSource).getRepository(KnownCrontabEntity).findOneByOrFail({ identifier: 'kept' });
    assert.deepEqual([entity.kind, entity.everyMs, entity.payload, entity.revision, entity.pausedAt], ['runtime', '3600000', { n: 1 }, changed.revision, null]);
  });
});
