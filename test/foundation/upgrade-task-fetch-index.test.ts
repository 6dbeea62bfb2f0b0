import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp } from '../support/app';
import { GROUPS_VERSION, OldWorkerProcess } from '../support/previous-version';
import { limitedHoldTasks, migrationNames, migrationsThrough, NewTasks, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const NEW_MIGRATION = 'TaskFetchIndex1765000000000';

/** The new version's `hold` (no limit) and `marker`. */
const HoldTasks = limitedHoldTasks({});

/**
 * A rolling deploy of the release whose claim starts its walk where its tasks' jobs begin
 * (migration 14: `jobs_task_fetch_idx`, built concurrently) beside a worker of d34684f: the
 * index is built under the old worker's running job and its claims of a backlog, and both
 * versions go on claiming, each job once.
 */
describe('upgrading to migration 14 (jobs_task_fetch_idx) while a worker of the previous version drains', () => {
  const u = upgradeSetup('upgrade_task_fetch', GROUPS_VERSION);
  const { q } = u;

  it('builds the index under running jobs and claims; old and new workers drain the backlog, each job once', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, migrationsThrough('JobGroups1764900000000'), 'the old version has every migration through 13');
    const [running] = await old.add([{ identifier: 'hold', payload: { gate: 'g0' } }]);
    await old.waitForOutput(`started hold ${running}`, new RegExp(`^started hold ${running}$`, 'm'));
    const before = await old.add(Array.from({ length: 500 }, (_, n) => ({ identifier: 'record', payload: { n } })), { many: true });

    const { logger, logs } = warningsLogger();
    const t = (u.app = await createTestApp({ url: u.db.url, providers: [NewTasks, HoldTasks], logger, jobQueue: { pollInterval: 200, concurrency: 4 } }));
    assert.ok((await migrationNames(u.sql)).includes(NEW_MIGRATION), `${NEW_MIGRATION} applied`);
    assert.deepEqual(await q(`select indisvalid as valid from pg_index where indexrelid = 'job_queue.jobs_task_fetch_idx'::regclass`), [{ valid: true }]);
    const after = (await t.jobs.addMany(Array.from({ length: 500 }, (_, n) => ({ identifier: 'record' as never, payload: { n: 500 + n } as never })))).map((job) => job.id);
    const all = [...before, ...after];
    await waitFor('every record job to run', async () => (await q('select 1 from runs where job_id = any($1::bigint[])', [all])).length === all.length, 30_000);
    assert.deepEqual(await q('select job_id from runs where job_id = any($1::bigint[]) group by job_id having count(*) > 1', [all]), [], 'each ran once');

    await old.open('g0');
    await waitFor('the held job to finish', async () => (await q('select 1 from job_queue.jobs where id = $1', [running])).length === 0);
    await old.terminate();
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
