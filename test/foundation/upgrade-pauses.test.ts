import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp } from '../support/app';
import { FLOWS_VERSION, FLOWS_VERSION_MIGRATIONS, OldWorkerProcess } from '../support/previous-version';
import { migrationNames, migrationsAfter, NewTasks, type Run, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const OLD_MIGRATIONS = FLOWS_VERSION_MIGRATIONS;
const NEW_MIGRATIONS = migrationsAfter(OLD_MIGRATIONS[OLD_MIGRATIONS.length - 1]);

/**
 * A rolling deploy of the release with pauses (migration 10, a `pauses` table) beside a worker
 * of 1572e48 (migrations 1–8): the migration applies under the running old worker, which
 * knows nothing of pauses and keeps claiming a paused task's jobs (as the README's
 * rolling-deploy notes say), while the new worker claims none of them; once the old worker
 * is gone, the paused jobs wait until the resume.
 */
describe('upgrading to migration 10 (pauses) while a worker of the previous version runs', () => {
  const u = upgradeSetup('upgrade_pauses', FLOWS_VERSION);
  const { q } = u;

  it("an old worker keeps running a paused task's jobs; new workers do not, and run them after the resume", async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, OLD_MIGRATIONS);
    const { logger, logs } = warningsLogger();
    const t = (u.app = await createTestApp({ url: u.db.url, providers: [NewTasks], logger, jobQueue: { pollInterval: 200, concurrency: 4 } }));
    assert.deepEqual(await migrationNames(u.sql), [...OLD_MIGRATIONS, ...NEW_MIGRATIONS]);

    await t.jobs.pauseTask('record');
    await waitFor('the new worker to know of the pause', () => t.worker.status().paused.some((p) => p.kind === 'task' && p.name === 'record'));
    const paused = (await t.jobs.addMany(Array.from({ length: 20 }, (_, n) => ({ identifier: 'record', payload: { n } })))).map((job) => job.id);
    await waitFor('the old worker to run the paused task\'s jobs', async () => (await q('select 1 from runs where job_id = any($1::bigint[])', [paused])).length === paused.length);
    const byPid = await q<{ pid: number; n: number }>('select pid, count(*)::int as n from runs where job_id = any($1::bigint[]) group by pid', [paused]);
    assert.deepEqual(byPid, [{ pid: old.pid, n: paused.length }], 'only the old worker ran them');

    // Without old workers, the pause holds: a job of another task added later runs (the new worker claimed after the paused jobs were added), they do not.
    await old.terminate();
    const held = (await t.jobs.addMany(Array.from({ length: 5 }, (_, n) => ({ identifier: 'record', payload: { held: n } })))).map((job) => job.id);
    const [marker] = await t.jobs.addMany([{ identifier: 'sleep', payload: { marker: true } }]);
    await waitFor('the new worker to run a job added after the held ones', async () => (await q('select 1 from runs where job_id = $1', [marker.id])).length === 1);
    assert.deepEqual(await q('select job_id from runs where job_id = any($1::bigint[])', [held]), [], 'the new worker runs none of the paused jobs');
    await t.jobs.resumeTask('record');
    await waitFor('the held jobs to run after the resume', async () => (await q('select 1 from runs where job_id = any($1::bigint[])', [held])).length === held.length);
    const runs = await q<Run>('select job_id::text, pid from runs where job_id = any($1::bigint[])', [held]);
    assert.ok(runs.every((run) => run.pid === process.pid), 'the new worker ran them');
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
