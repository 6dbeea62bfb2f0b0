import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp } from '../support/app';
import { FLOWS_VERSION, FLOWS_VERSION_MIGRATIONS, OldWorkerProcess } from '../support/previous-version';
import { distinctTicks, tickJobs, ticksAfter } from '../support/schedule-ticks';
import { migrationNames, NewTasks, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const OLD_MIGRATIONS = FLOWS_VERSION_MIGRATIONS;
const NEW_MIGRATION = 'Schedules1764700000000';
/** The schedule both versions declare: `tick` every second, in UTC (old-worker.js: OLD_WORKER_CRON). */
const TICK_EVERY_SECOND = '* * * * * *';

@Injectable()
class NewSchedule {
  constructor(private readonly tasks: NewTasks) {}

  @Task('tick')
  @Cron(TICK_EVERY_SECOND, { timeZone: 'UTC' })
  async tick(payload: unknown, ctx: JobContext) {
    await this.tasks.record(payload, ctx);
  }
}

/**
 * A rolling deploy of the release with schedules kept in the database (migration 11) while a
 * worker of 1572e48 (migrations 1–8, no schedules at run time) ticks its own `@Cron` `tick`,
 * which the new version declares too. What docs/guides/cron.md says of old workers: they never
 * tick a run-time schedule, they keep ticking their own `@Cron` as their code declares it (a
 * pause does not reach them), and each tick still becomes one job.
 */
describe('upgrading to migration 11 (schedules) while workers of the previous version run', () => {
  const u = upgradeSetup('upgrade_schedules', FLOWS_VERSION);
  const { q } = u;
  /** The ticks of `tick` that ran (their `_cron.ts`), whichever version ran them. */
  const tickRuns = async () => (await q<{ ts: string }>(`select payload->'_cron'->>'ts' as ts from runs where task = 'tick' order by n`)).map((r) => Date.parse(r.ts));
  const tickRunAfter = (after: number, what: string) => waitFor(what, async () => (await tickRuns()).some((ts) => ts > after));

  it("old workers keep ticking their own @Cron once per tick, ignore run-time schedules and pauses, and the migration applies under them", async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url, { OLD_WORKER_CRON: TICK_EVERY_SECOND });
    assert.deepEqual(old.library?.migrations, OLD_MIGRATIONS);
    await tickRunAfter(0, 'the old worker to tick and run a tick before the migration');

    const { logger, logs } = warningsLogger();
    const t = (u.app = await createTestApp({ url: u.db.url, providers: [NewTasks, NewSchedule], logger, jobQueue: { pollInterval: 200, concurrency: 4 } }));
    const names = await migrationNames(u.sql);
    assert.deepEqual(names.slice(0, OLD_MIGRATIONS.length), OLD_MIGRATIONS);
    assert.ok(names.slice(OLD_MIGRATIONS.length).includes(NEW_MIGRATION), `${NEW_MIGRATION} applied: ${names.join(', ')}`);
    const migratedAt = Date.now();
    await tickRunAfter(migratedAt + 1_000, 'a tick after the migration');

    // a run-time schedule: the new app ticks it
    const beat = await t.jobs.upsertSchedule('beat', { every: '1s', identifier: 'record', payload: { by: 'schedule' } });
    await ticksAfter(u.sql, 'beat', beat.updatedAt!.getTime(), 2, ' (the new app)');
    assert.deepEqual((await t.jobs.listSchedules()).map((s) => [s.id, s.declaredInCode]), [['beat', false], ['tick', true]]);

    // `tick` paused: the new app adds none of its ticks, the old worker knows no pause and goes on
    const paused = await t.jobs.pauseSchedule('tick');
    await tickRunAfter(paused.pausedAt!.getTime() + 2_000, 'the old worker to tick on through the pause');
    await t.jobs.resumeSchedule('tick');

    // the new app goes away: the old worker is left alone with both schedules
    await u.app.close();
    u.app = undefined;
    const closedAt = Date.now();
    await tickRunAfter(closedAt + 3_000, 'the old worker to tick three more seconds alone');
    assert.deepEqual((await tickJobs(u.sql, 'beat')).filter((tick) => tick.ts > closedAt), [], 'the old worker ticks no run-time schedule');
    const [row] = await q<{ kind: string; every_ms: string }>(`select kind, every_ms::text from job_queue.known_crontabs where identifier = 'beat'`);
    assert.deepEqual(row, { kind: 'runtime', every_ms: '1000' }, "the old worker leaves the run-time schedule's row alone");

    // each tick of `tick` ran once, whichever version claimed it, before, during and after the migration
    await waitFor('every tick job to run', async () => (await q<{ n: number }>(`select count(*)::int as n from job_queue.jobs where task_identifier = 'tick'`))[0].n === 0);
    const ticks = await tickRuns();
    assert.deepEqual(ticks.filter((ts, i) => ticks.indexOf(ts) !== i), [], `no tick ran twice (of ${ticks.length})`);
    assert.ok(distinctTicks(await tickJobs(u.sql, 'beat')));
    assert.deepEqual(logs.filter((line) => !/failed, retrying/.test(line)), [], 'the new app logged no warning');
  });
});
