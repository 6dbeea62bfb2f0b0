import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp } from '../support/app';
import { OldWorkerProcess, TASK_FETCH_VERSION } from '../support/previous-version';
import { limitedHoldTasks, migrationNames, migrationsThrough, NewTasks, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const NEW_MIGRATION = 'JobsVacuumTruncate1765100000000';

/** The new version's `hold` (no limit) and `marker`. */
const HoldTasks = limitedHoldTasks({});

/**
 * A rolling deploy of the release whose `jobs` table is never truncated by a vacuum (migration
 * 15: `vacuum_truncate = false`; a truncating vacuum takes the table's exclusive lock, which
 * every add, claim and release waits behind) beside a worker of fab88a8: the setting applies under
 * the old worker's running job and its claims of a backlog, both versions go on claiming, each
 * job once, and a vacuum of the drained table keeps its pages.
 */
describe('upgrading to migration 15 (jobs never truncated by a vacuum) while a worker of the previous version drains', () => {
  const u = upgradeSetup('upgrade_vacuum_truncate', TASK_FETCH_VERSION);
  const { q } = u;

  it('applies under running jobs and claims; old and new workers drain the backlog, each job once; a vacuum leaves the pages', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, migrationsThrough('TaskFetchIndex1765000000000'), 'the old version has every migration through 14');
    const [running] = await old.add([{ identifier: 'hold', payload: { gate: 'g0' } }]);
    await old.waitForOutput(`started hold ${running}`, new RegExp(`^started hold ${running}$`, 'm'));
    const before = await old.add(Array.from({ length: 500 }, (_, n) => ({ identifier: 'record', payload: { n } })), { many: true });

    const { logger, logs } = warningsLogger();
    const t = (u.app = await createTestApp({ url: u.db.url, providers: [NewTasks, HoldTasks], logger, jobQueue: { pollInterval: 200, concurrency: 4 } }));
    assert.ok((await migrationNames(u.sql)).includes(NEW_MIGRATION), `${NEW_MIGRATION} applied`);
    assert.deepEqual(await q(`select reloptions from pg_class where oid = 'job_queue.jobs'::regclass`), [{ reloptions: ['vacuum_truncate=false'] }]);
    const after = (await t.jobs.addMany(Array.from({ length: 500 }, (_, n) => ({ identifier: 'record' as never, payload: { n: 500 + n } as never })))).map((job) => job.id);
    const all = [...before, ...after];
    await waitFor('every record job to run', async () => (await q('select 1 from runs where job_id = any($1::bigint[])', [all])).length === all.length, 30_000);
    assert.deepEqual(await q('select job_id from runs where job_id = any($1::bigint[]) group by job_id having count(*) > 1', [all]), [], 'each ran once');

    await old.open('g0');
    await waitFor('the held job to finish', async () => (await q('select 1 from job_queue.jobs where id = $1', [running])).length === 0);
    await old.terminate();
    // Every row of the drained table is dead: a vacuum that truncated would give its pages back.
    const pages = async () => (await q<{ pages: number }>(`select pg_relation_size('job_queue.jobs')::int / current_setting('block_size')::int as pages`))[0].pages;
    const drained = await pages();
    assert.ok(drained > 0, `the drained table still has its pages: ${drained}`);
    await u.sql.query('vacuum job_queue.jobs');
    assert.equal(await pages(), drained, 'a vacuum of the drained table kept its pages');
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
