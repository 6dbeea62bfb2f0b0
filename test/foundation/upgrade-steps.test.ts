import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { EVENTS_VERSION, OldWorkerProcess } from '../support/previous-version';
import { assertEachRanOnce, migrationNames, migrationsAfter, NewTasks, printed, queuesHeadedBySleeps, recordRun, type Run, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitForValue } from '../support/wait';

const OLD_MIGRATIONS = ['CreateJobTables1763700000000', 'RecoveryAndQueueOrder1763800000000', 'JobLifecycle1763900000000', 'Operations1764000000000', 'ClaimByQueueHeads1764100000000', 'EventListeners1764200000000'];
const NEW_MIGRATION = 'JobStepsAndBatches1764400000000';
const SLEEP_MS = 3_000;

/** A task of the new version only: a durable step, then the run recorded as `record` does. */
@Injectable()
class SteppedTasks {
  constructor(private readonly dataSource: DataSource) {}

  @Task('stepped')
  async stepped(payload: unknown, ctx: JobContext) {
    const step = await ctx.step('once', () => ({ by: process.pid }));
    await recordRun(this.dataSource, { ...(payload as object), step }, ctx);
  }
}

/**
 * A rolling deploy of the release with durable steps and batch jobs (migration 8: the
 * job_steps table, add_job() replaced) while a worker of the previous release (9ca3c3e,
 * migrations 1–6) runs: the migration applies under it, both versions run every job once and
 * queues in order, the old app's keyed adds (its own prepared add_job calls) merge array
 * payloads from then on, and the new app's steps are recorded.
 */
describe('upgrading to migration 8 while workers of the previous version run', () => {
  const u = upgradeSetup('upgrade_steps', EVENTS_VERSION);
  const { q } = u;
  let t: TestApp | undefined;

  it('every job runs once, queues keep their order, the old app\'s keyed adds merge arrays, and the new app\'s steps are recorded', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, OLD_MIGRATIONS, `the library of ${EVENTS_VERSION} knows six migrations`);
    const later = new Date(Date.now() + 3_600_000).toISOString();
    const keyed = (payload: unknown) => old.add([{ identifier: 'record', payload, jobKey: 'batch', runAt: later }]);
    const [batch] = await keyed([1]);
    await keyed([2]);
    assert.deepEqual((await q('select payload from job_queue.jobs where id = $1', [batch]))[0].payload, [2], 'before the migration, an add replaces');
    const before = await old.add(Array.from({ length: 20 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before', n } })));
    await waitForValue(u.sql, 'the old worker to run its first jobs', `select count(*)::int from runs where job_id = any($1::bigint[])`, 20, [before]);
    const { sleeps, queued } = await queuesHeadedBySleeps(u, SLEEP_MS);
    for (const id of sleeps) await printed(old, `started sleep ${id}`);

    // the new code starts beside it and migrates
    const { logger, logs } = warningsLogger();
    t = u.app = await createTestApp({ url: u.db.url, providers: [NewTasks, SteppedTasks], logger, jobQueue: { pollInterval: 200, concurrency: 4 } });
    assert.deepEqual(await migrationNames(u.sql), [...OLD_MIGRATIONS, 'Flows1764300000000', NEW_MIGRATION, ...migrationsAfter(NEW_MIGRATION)]);
    assert.deepEqual(
      await q('select id::text, locked_by from job_queue.jobs where id = any($1::bigint[]) order by id', [sleeps]),
      sleeps.map((id) => ({ id, locked_by: old.workerId })),
      'the old worker still ran its sleeps when the migration was done (SLEEP_MS too short?)',
    );

    // the old app's add_job calls now merge; its other adds and the new app's go on as before
    await keyed([3, 4]);
    assert.deepEqual((await q('select payload from job_queue.jobs where id = $1', [batch]))[0].payload, [2, 3, 4], 'after it, the old app\'s add merges');
    const stepped = (await t.jobs.addMany(Array.from({ length: 5 }, (_, n) => ({ identifier: 'stepped', payload: { by: 'new-stepped', n }, flags: ['new-only'] })))).map((job) => job.id);
    const after = [
      ...(await old.add(Array.from({ length: 30 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after', n } })))),
      ...(await t.jobs.addMany(Array.from({ length: 30 }, (_, n) => ({ identifier: 'record', payload: { by: 'new', n } })))).map((job) => job.id),
    ];
    await waitForValue(u.sql, 'every due job to run and be released', 'select count(*)::int from job_queue.jobs where id <> $1', 0, [batch]);
    for (const id of sleeps) await printed(old, `finished sleep ${id}`);

    const runs = await q<Run>('select job_id::text, pid, attempt, task, payload, at from runs order by n');
    assertEachRanOnce(runs, [...before, ...sleeps, ...queued, ...stepped, ...after]);
    assert.deepEqual(
      runs.filter((run) => stepped.includes(run.job_id)).map((run) => [run.pid, run.payload.step]),
      stepped.map(() => [process.pid, { by: process.pid }]),
      'the new worker ran the steps',
    );
    assert.equal((await q('select count(*)::int as n from job_queue.job_steps where job_id = any($1::bigint[])', [stepped]))[0].n, 5, 'and recorded them');
    assert.doesNotMatch(old.output, /failed, retrying|add failed|Error/, 'the old worker reported no error');
    assert.deepEqual(logs, [], 'the new app neither warned nor erred');
    assert.deepEqual(await old.terminate(), { code: null, signal: 'SIGTERM' });
  });
});
