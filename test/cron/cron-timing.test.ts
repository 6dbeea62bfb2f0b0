import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createCronItem, LATE_TICK_GRACE_MS, nextWakeAt, ticksDue } from '../../libs/job-queue/src/cron/cron-item';

const at = (iso: string) => new Date(`2026-03-01T${iso}Z`);
const iso = (dates: Date[]) => dates.map((d) => d.toISOString().slice(11, 19));

describe('cron timing is read from the clock', () => {
  const everySecond = createCronItem({ identifier: 's', task: 's', expression: '* * * * * *', timeZone: 'UTC', source: 'test' });
  const withFill = createCronItem({ identifier: 'f', task: 'f', expression: '* * * * * *', timeZone: 'UTC', backfillPeriod: '3s', source: 'test' });

  it('a wake-up on time adds the tick that is due', () => {
    const due = ticksDue(everySecond, at('10:00:00'), at('10:00:01.004'));
    assert.deepEqual(iso(due.onTime), ['10:00:01']);
    assert.deepEqual(due.missed, []);
  });

  it('a wake-up a few seconds late (a stall, a short database outage) adds every tick it owes, as live ones', () => {
    const due = ticksDue(everySecond, at('10:00:00'), at('10:00:03.700'));
    assert.deepEqual(iso(due.onTime), ['10:00:01', '10:00:02', '10:00:03']);
    assert.deepEqual(due.missed, []);
    const limit = ticksDue(everySecond, at('10:00:00'), new Date(at('10:00:01').getTime() + LATE_TICK_GRACE_MS));
    assert.equal(limit.onTime.length, LATE_TICK_GRACE_MS / 1000 + 1, 'up to the grace period, nothing is dropped');
  });

  it('after the process slept (or the clock jumped forward) an hour: one tick, not a burst', () => {
    const due = ticksDue(everySecond, at('10:00:00'), at('11:00:00.500'));
    assert.deepEqual(iso(due.onTime), ['11:00:00']);
    assert.deepEqual(due.missed, []);
    const justOver = ticksDue(everySecond, at('10:00:00'), new Date(at('10:00:01').getTime() + LATE_TICK_GRACE_MS + 1));
    assert.equal(justOver.onTime.length, 1, 'past the grace period, one tick');
  });

  it('with a backfill period, the missed ticks within it are added too', () => {
    const due = ticksDue(withFill, at('10:00:00'), at('11:00:00.500'));
    assert.deepEqual(iso(due.onTime), ['11:00:00']);
    assert.deepEqual(iso(due.missed), ['10:59:58', '10:59:59']);
  });

  it('a clock that jumped back adds nothing until it passes the last tick again', () => {
    assert.deepEqual(ticksDue(everySecond, at('10:00:00'), at('09:30:00')), { onTime: [], missed: [] });
    assert.deepEqual(ticksDue(everySecond, at('10:00:00'), at('10:00:00.900')), { onTime: [], missed: [] });
  });

  it('a daily schedule found late still adds its latest tick', () => {
    const daily = createCronItem({ identifier: 'd', task: 'd', expression: '0 3 * * *', timeZone: 'UTC', source: 'test' });
    const due = ticksDue(daily, new Date('2026-03-01T02:59:59Z'), new Date('2026-03-01T15:00:00Z'));
    assert.deepEqual(due.onTime.map((d) => d.toISOString()), ['2026-03-01T03:00:00.000Z']);
    const weekLate = ticksDue(daily, new Date('2026-03-01T02:59:59Z'), new Date('2026-03-08T15:00:00Z'));
    assert.deepEqual(weekLate.onTime.map((d) => d.toISOString()), ['2026-03-08T03:00:00.000Z']);
  });

  it('a timer that fires a millisecond before a daily tick wakes again for it, not a day later', () => {
    // seen in a stress run: the wake-up at 22.999 found nothing due, and the next wake-up,
    // counted from the clock read a millisecond later, skipped the 23.000 tick for a day
    const daily = createCronItem({ identifier: 'd', task: 'd', expression: '23 29 3 * * *', timeZone: 'UTC', source: 'test' });
    const cursors = new Map([['d', at('03:29:20.140')]]);
    const early = at('03:29:22.999');
    assert.deepEqual(ticksDue(daily, cursors.get('d')!, early), { onTime: [], missed: [] });
    assert.equal(nextWakeAt([daily], cursors, early).toISOString(), '2026-03-01T03:29:23.000Z');
    assert.deepEqual(iso(ticksDue(daily, cursors.get('d')!, at('03:29:23.000')).onTime), ['03:29:23']);
  });

  it('the next wake-up is the earliest next tick of any schedule, after its cursor', () => {
    const daily = createCronItem({ identifier: 'd', task: 'd', expression: '0 3 * * *', timeZone: 'UTC', source: 'test' });
    const cursors = new Map([['s', at('10:00:05')], ['d', at('10:00:00')]]);
    assert.equal(nextWakeAt([daily, everySecond], cursors, at('10:00:00.500')).toISOString(), '2026-03-01T10:00:06.000Z');
    assert.equal(nextWakeAt([daily], cursors, at('10:00:00.500')).toISOString(), '2026-03-02T03:00:00.000Z');
  });
});
