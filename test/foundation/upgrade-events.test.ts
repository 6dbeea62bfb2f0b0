import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { OnQueueEvent, type QueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { OldWorkerProcess, QUEUE_HEADS_VERSION } from '../support/previous-version';
import { assertEachRanOnce, migrationNames, migrationsAfter, NewTasks, printed, queuesHeadedBySleeps, type Run, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor, waitForValue } from '../support/wait';

const OLD_MIGRATIONS = ['CreateJobTables1763700000000', 'RecoveryAndQueueOrder1763800000000', 'JobLifecycle1763900000000', 'Operations1764000000000', 'ClaimByQueueHeads1764100000000'];
const NEW_MIGRATION = 'EventListeners1764200000000';
const LATER_MIGRATIONS = migrationsAfter(NEW_MIGRATION);
const SLEEP_MS = 3_000;

const heard: QueueEvent[] = [];

@Injectable()
class Completions {
  @OnQueueEvent('job:completed')
  on(event: QueueEvent) {
    heard.push(event);
  }
}

/**
 * A rolling deploy of the release that adds cluster-wide events (migration 6: the
 * event_listeners table) while a worker of the previous release (6521d3b, migrations 1–5)
 * runs. The new app listens from its start: the workers of both versions run every job once,
 * the old one unaware of the listener (it publishes nothing: docs/guides/events.md), the new
 * one publishing what it runs.
 */
describe('upgrading to migration 6 while workers of the previous version run', () => {
  const u = upgradeSetup('upgrade_events', QUEUE_HEADS_VERSION);
  const { q } = u;
  let t: TestApp | undefined;

  it('every job runs once, queues keep their order, and the new worker publishes what it runs while the old one publishes nothing', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, OLD_MIGRATIONS, `the library of ${QUEUE_HEADS_VERSION} knows five migrations`);
    const before = await old.add(Array.from({ length: 20 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before', n } })));
    await waitForValue(u.sql, 'the old worker to run its first jobs', `select count(*)::int from runs where job_id = any($1::bigint[])`, 20, [before]);
    const { sleeps, queued } = await queuesHeadedBySleeps(u, SLEEP_MS);
    for (const id of sleeps) await printed(old, `started sleep ${id}`);

    // the new code starts beside it, migrates, and listens to completions from its start
    const { logger, logs } = warningsLogger();
    t = u.app = await createTestApp({ url: u.db.url, providers: [NewTasks, Completions], logger, jobQueue: { pollInterval: 200, concurrency: 4 } });
    assert.deepEqual(await migrationNames(u.sql), [...OLD_MIGRATIONS, NEW_MIGRATION, ...LATER_MIGRATIONS]);
    assert.equal((await q('select 1 from job_queue.event_listeners where expires_at > now()')).length, 1, 'the new app listens');

    const after = [
      ...(await old.add(Array.from({ length: 30 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after', n } })))),
      ...(await t.jobs.addMany(Array.from({ length: 30 }, (_, n) => ({ identifier: 'record', payload: { by: 'new', n } })))).map((job) => job.id),
    ];
    await waitForValue(u.sql, 'every job to run and be released', 'select count(*)::int from job_queue.jobs', 0);
    for (const id of sleeps) await printed(old, `finished sleep ${id}`);
    const runs = await q<Run>('select job_id::text, pid, attempt, task, payload, at from runs order by n');
    assertEachRanOnce(runs, [...before, ...sleeps, ...queued, ...after]);
    const inOrder = (queue: string) => runs.filter((run) => run.payload?.queue === queue).map((run) => run.payload.seq as number);
    for (const queue of new Set(runs.map((run) => run.payload?.queue as string | undefined).filter(Boolean))) {
      assert.deepEqual(inOrder(queue!), [...inOrder(queue!)].sort((a, b) => a - b), `queue ${queue} ran in order`);
    }

    // what the new worker ran is heard; what the old one ran is not (it predates the events)
    const ranBy = (pid: number) => new Set(runs.filter((run) => run.pid === pid).map((run) => run.job_id));
    const byNew = [...ranBy(process.pid)].filter((id) => after.includes(id) || queued.includes(id));
    assert.ok(byNew.length > 0, 'the new worker ran some of the jobs');
    await waitFor('the new worker\'s completions to be heard', () => byNew.every((id) => heard.some((event) => event.jobId === id)));
    const byOld = ranBy(old.pid);
    assert.deepEqual(heard.filter((event) => byOld.has(event.jobId)), [], 'nothing the old worker ran was published');
    assert.doesNotMatch(old.output, /failed, retrying|add failed|Error/, 'the old worker reported no error');
    assert.deepEqual(logs, [], 'the new app neither warned nor erred');
    assert.deepEqual(await old.terminate(), { code: null, signal: 'SIGTERM' });
  });
});
