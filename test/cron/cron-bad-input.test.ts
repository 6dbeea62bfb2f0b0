import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable, Scope, type Provider } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { Task, type JobQueueErrorCode } from '../../libs/job-queue/src';
import { createCronItem } from '../../libs/job-queue/src/cron/cron-item';
import { createTestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

@Injectable()
class BadExpression {
  @Task('bad_expression')
  @Cron('61 * * * *')
  async run() {}
}

@Injectable()
class BadZone {
  @Task('bad_zone')
  @Cron('* * * * *', { timeZone: 'Mars/Olympus_Mons' })
  async run() {}
}

@Injectable()
class TwoSchedules {
  @Task('first')
  @Cron('* * * * *', { name: 'shared' })
  async first() {}

  @Task('second')
  @Cron('*/5 * * * *', { name: 'shared' })
  async second() {}
}

@Injectable({ scope: Scope.REQUEST })
class RequestScopedCron {
  @Task('per_request_cron')
  @Cron('* * * * *')
  async run() {}
}

@Injectable()
class OneCron {
  @Task('one')
  @Cron('* * * * *', { name: 'clash' })
  async run() {}
}

@Injectable()
class Known {
  @Task('known')
  async run() {}
}

describe('cron bad input stops the app with a JQ_* code naming the place', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  before(async () => {
    db = await createTestDatabase('cron_bad');
  });
  after(async () => db.drop());

  const cases: Array<[string, Provider[], JobQueueErrorCode, RegExp, string?]> = [
    ['an invalid expression', [BadExpression], 'JQ_INVALID_CRON_EXPRESSION', /BadExpression\.run/],
    ['an unknown time zone', [BadZone], 'JQ_INVALID_TIME_ZONE', /BadZone\.run.*Mars\/Olympus_Mons/],
    ['two schedules with one identifier', [TwoSchedules], 'JQ_DUPLICATE_CRON', /TwoSchedules\.first.*TwoSchedules\.second/],
    ['@Cron on a request-scoped provider', [RequestScopedCron], 'JQ_REQUEST_SCOPED_CRON', /RequestScopedCron\.run/],
    ['a crontab line that does not parse', [Known], 'JQ_INVALID_CRONTAB', /crontab line 1/, '* * * known'],
    ['a crontab option that does not exist', [Known], 'JQ_INVALID_CRONTAB', /unknown option 'every'/, '* * * * * known ?every=2'],
    ['a crontab payload that is not JSON5', [Known], 'JQ_INVALID_CRONTAB', /not valid JSON5/, '* * * * * known {nope}'],
    ['a crontab naming an unknown task', [Known], 'JQ_UNKNOWN_TASK', /unknown_task/, '* * * * * unknown_task'],
    ['a crontab with a bad expression', [Known], 'JQ_INVALID_CRON_EXPRESSION', /crontab line 2/, '\n99 * * * * known'],
    ['a crontab fill that is not a period', [Known], 'JQ_INVALID_CRONTAB', /fill must be a period/, '* * * * * known ?fill=forever'],
    ['a crontab schedule with the identifier of a @Cron', [Known, OneCron], 'JQ_DUPLICATE_CRON', /OneCron\.run.*crontab line 1/, '* * * * * known ?id=clash'],
  ];

  for (const [name, providers, code, message, crontab] of cases) {
    it(`${name} → ${code}`, async () => {
      await assert.rejects(createTestApp({ url: db.url, providers, jobQueue: { worker: false, crontab } }), (error: { code?: string; message: string }) => {
        assert.equal(error.code, code, error.message);
        assert.match(error.message, message);
        return true;
      });
    });
  }

  it('a disabled @Cron is not scheduled', async () => {
    @Injectable()
    class Disabled {
      @Task('disabled_cron')
      @Cron('* * * * * *', { disabled: true })
      async run() {}

      /** Its ticks show that the scheduler ran: a disabled schedule would have ticked beside them. */
      @Task('enabled_cron')
      @Cron('* * * * * *')
      async enabled() {}
    }
    const t = await createTestApp({ url: db.url, providers: [Disabled], jobQueue: { worker: false } });
    const sql = await connect(db.url);
    const count = async (query: string, identifier: string) => (await sql.query(query, [identifier])).rows[0].n as number;
    const jobsOf = (task: string) => count(`select count(*)::int as n from job_queue.jobs where task_identifier = $1`, task);
    const knownAs = (identifier: string) => count(`select count(*)::int as n from job_queue.known_crontabs where identifier = $1`, identifier);
    try {
      await waitFor('two ticks of the enabled schedule', async () => (await jobsOf('enabled_cron')) >= 2);
    } finally {
      await t.close();
    }
    const seen = { jobs: await jobsOf('disabled_cron'), known: await knownAs('disabled_cron') };
    await sql.end();
    assert.deepEqual(seen, { jobs: 0, known: 0 });
  });

  it('computes ticks in the given zone', () => {
    const paris = createCronItem({ identifier: 'p', task: 'p', expression: '0 3 * * *', timeZone: 'Europe/Paris', source: 'test' });
    assert.equal(paris.next(new Date('2026-01-01T00:00:00Z')).toISOString(), '2026-01-01T02:00:00.000Z');
    assert.equal(paris.next(new Date('2026-07-01T00:00:00Z')).toISOString(), '2026-07-01T01:00:00.000Z');
    const offset = createCronItem({ identifier: 'o', task: 'o', expression: '0 3 * * *', utcOffset: -300, source: 'test' });
    assert.equal(offset.next(new Date('2026-01-01T00:00:00Z')).toISOString(), '2026-01-01T08:00:00.000Z');
  });
});
