import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TASK_FETCH_VERSION } from '../support/previous-version';
import { upgradeSetup } from '../support/upgrade';
import { drainBesideOldWorker } from '../support/upgrade-drain';

/**
 * A rolling deploy of the release whose `jobs` table is never truncated by a vacuum (migration
 * 15: `vacuum_truncate = false`; a truncating vacuum takes the table's exclusive lock, which
 * every add, claim and release waits behind) beside a worker of fab88a8: the setting applies under
 * the old worker's running job and its claims of a backlog, both versions go on claiming, each
 * job once, and a vacuum of the drained table keeps its pages.
 */
describe('upgrading to migration 15 (jobs never truncated by a vacuum) while a worker of the previous version drains', () => {
  const u = upgradeSetup('upgrade_vacuum_truncate', TASK_FETCH_VERSION);

  it('applies under running jobs and claims; old and new workers drain the backlog, each job once; a vacuum leaves the pages', async () => {
    const logs = await drainBesideOldWorker(u, {
      oldThrough: 'TaskFetchIndex1765000000000',
      newMigration: 'JobsVacuumTruncate1765100000000',
      afterMigration: async () =>
        assert.deepEqual(await u.q(`select c.reloptions, t.reloptions as toast from pg_class c join pg_class t on t.oid = c.reltoastrelid where c.oid = 'job_queue.jobs'::regclass`), [
          { reloptions: ['vacuum_truncate=false'], toast: ['vacuum_truncate=false'] },
        ]),
    });
    // Every row of the drained table is dead: a vacuum that truncated would give its pages back.
    const pages = async () => (await u.q<{ pages: number }>(`select pg_relation_size('job_queue.jobs')::int / current_setting('block_size')::int as pages`))[0].pages;
    const drained = await pages();
    assert.ok(drained > 0, `the drained table still has its pages: ${drained}`);
    await u.sql.query('vacuum job_queue.jobs');
    assert.equal(await pages(), drained, 'a vacuum of the drained table kept its pages');
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
