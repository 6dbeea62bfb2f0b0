import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { JobQueueMaintenance } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { FLOWS_VERSION, FLOWS_VERSION_MIGRATIONS, OldWorkerProcess } from '../support/previous-version';
import { scannedJobCounts } from '../support/scanned-counts';
import { migrationNames, migrationsAfter, NewTasks, type Run, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitForValue } from '../support/wait';

const OLD_MIGRATIONS = FLOWS_VERSION_MIGRATIONS;
const NEW_MIGRATION = 'JobCounts1764500000000';

/**
 * A rolling deploy of the release with job counters (migration 9: job_counts, their deltas and
 * triggers, two partial indexes) onto a populated database, while a worker of the previous
 * release (1572e48, migrations 1–8) holds jobs, retries one, and adds and runs jobs throughout
 * the migration: the initial count and the triggers together count every job once (countJobs()
 * equals a scan of every row), before the new code's first fold and after it, and after both
 * versions drained what was left.
 */
describe('upgrading to migration 9 while workers of the previous version run', () => {
  const u = upgradeSetup('upgrade_counts', FLOWS_VERSION);
  const { q } = u;
  let t: TestApp | undefined;

  it('countJobs() is exact after a migration that old workers\' adds, claims and releases raced, and stays exact as both drain', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, OLD_MIGRATIONS, `the library of ${FLOWS_VERSION} knows eight migrations`);
    // What the old worker leaves where it is across the migration: jobs it holds, one it retries an hour later, scheduled ones, and a backlog only the new code may take.
    const held = await old.add([1, 2].map((n) => ({ identifier: 'hold', payload: { gate: 'g', n } })));
    const retried = await old.add([{ identifier: 'hold', payload: { gate: 'open-now', fail: 'once' }, maxAttempts: 3 }]);
    await old.open('open-now');
    await waitForValue(u.sql, 'the old worker to fail the retried job once', `select attempts from job_queue.jobs where id = $1 and locked_at is null`, 1, retried);
    const later = new Date(Date.now() + 3_600_000).toISOString();
    await old.add(Array.from({ length: 30 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-scheduled', n }, runAt: later, queueName: n % 2 ? 'q-later' : undefined })), { many: true });
    const backlog = await old.add(Array.from({ length: 2_000 }, (_, n) => ({ identifier: 'record', payload: { by: 'backlog', n }, flags: ['new-only'], queueName: n % 4 ? undefined : `q-${n % 3}` })), { many: true });
    await waitForValue(u.sql, 'the old worker to hold its two jobs', `select count(*)::int from job_queue.jobs where id = any($1::bigint[]) and started_at is not null`, 2, [held]);

    // The old app adds jobs that its worker runs, all the while the new code migrates.
    let migrating = true;
    const racing: string[] = [];
    const adder = (async () => {
      for (let round = 0; migrating || round < 3; round++) {
        racing.push(...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-racing', round, n } })), { many: round % 2 === 0 })));
      }
    })();
    const { logger } = warningsLogger();
    t = u.app = await createTestApp({ url: u.db.url, providers: [NewTasks], logger, jobQueue: { worker: false, externalTasks: '*' } }).finally(() => (migrating = false));
    await adder;
    assert.deepEqual(await migrationNames(u.sql), [...OLD_MIGRATIONS, NEW_MIGRATION, ...migrationsAfter(NEW_MIGRATION)]);
    await waitForValue(u.sql, 'the old worker to run the jobs added during the migration', `select count(*)::int from job_queue.jobs where id = any($1::bigint[])`, 0, [racing]);

    const exact = async (when: string) => assert.deepEqual(await t!.jobs.countJobs(), await scannedJobCounts(u.sql), when);
    await exact('after the migration, before any fold');
    const counts = await t.jobs.countJobs();
    assert.deepEqual(
      [counts.byState.running, counts.byState.retrying, counts.byState.scheduled, counts.byState.waiting],
      [2, 1, 30, backlog.length],
      'the jobs left where they were',
    );
    await t.app.get(JobQueueMaintenance).runOnce();
    await exact('after the new code\'s fold');

    // Both drain: the old worker its held jobs, the new worker the backlog (the retried job waits for its hour).
    await old.open('g');
    await u.app.close();
    t = u.app = await createTestApp({ url: u.db.url, providers: [NewTasks], logger, jobQueue: { pollInterval: 200, concurrency: 8 } });
    await waitForValue(u.sql, 'every due job to finish', `select count(*)::int from job_queue.jobs where run_at <= now()`, 0);
    await exact('after both drained');
    await t.app.get(JobQueueMaintenance).runOnce();
    await exact('after the last fold');
    assert.deepEqual([(await t.jobs.countJobs()).byState.scheduled, (await t.jobs.countJobs()).byState.retrying], [30, 1]);
    const runs = await q<Run>('select job_id::text, pid, attempt, task, payload, at from runs order by n');
    const ran = runs.filter((run) => !retried.includes(run.job_id)).map((run) => run.job_id);
    assert.deepEqual(ran.sort(), [...held, ...backlog, ...racing].sort(), 'every due job ran, once');
  });
});
