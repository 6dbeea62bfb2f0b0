import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createCronItem, ticksDue } from '../../libs/job-queue/src/cron/cron-item';

const at = (iso: string) => new Date(`2026-03-01T${iso}Z`);
const iso = (dates: Date[]) => dates.map((d) => d.toISOString().slice(11, 19));

describe('cron timing is read from the clock', () => {
  const everySecond = createCronItem({ identifier: 's', task: 's', expression: '* * * * * *', timeZone: 'UTC', source: 'test' });
  const withFill = createCronItem({ identifier: 'f', task: 'f', expression: '* * * * * *', timeZone: 'UTC', backfillPeriod: '3s', source: 'test' });

  it('a wake-up on time adds the tick that is due', () => {
    const due = ticksDue(everySecond, at('10:00:00'), at('10:00:01.004'));
    assert.equal(due.latest?.toISOString(), at('10:00:01').toISOString());
    assert.deepEqual(due.missed, []);
  });

  it('after the process slept (or the clock jumped forward) an hour: one tick, not a burst', () => {
    const due = ticksDue(everySecond, at('10:00:00'), at('11:00:00.500'));
    assert.equal(due.latest?.toISOString(), at('11:00:00').toISOString());
    assert.deepEqual(due.missed, []);
  });

  it('with a backfill period, the missed ticks within it are added too', () => {
    const due = ticksDue(withFill, at('10:00:00'), at('11:00:00.500'));
    assert.equal(due.latest?.toISOString(), at('11:00:00').toISOString());
    assert.deepEqual(iso(due.missed), ['10:59:58', '10:59:59']);
  });

  it('a clock that jumped back adds nothing until it passes the last tick again', () => {
    assert.equal(ticksDue(everySecond, at('10:00:00'), at('09:30:00')).latest, undefined);
    assert.equal(ticksDue(everySecond, at('10:00:00'), at('10:00:00.900')).latest, undefined);
  });

  it('a daily schedule found late still adds its latest tick', () => {
    const daily = createCronItem({ identifier: 'd', task: 'd', expression: '0 3 * * *', timeZone: 'UTC', source: 'test' });
    const due = ticksDue(daily, new Date('2026-03-01T02:59:59Z'), new Date('2026-03-01T15:00:00Z'));
    assert.equal(due.latest?.toISOString(), '2026-03-01T03:00:00.000Z');
  });
});
