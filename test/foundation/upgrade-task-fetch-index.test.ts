import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GROUPS_VERSION } from '../support/previous-version';
import { upgradeSetup } from '../support/upgrade';
import { drainBesideOldWorker } from '../support/upgrade-drain';

/**
 * A rolling deploy of the release whose claim starts its walk where its tasks' jobs begin
 * (migration 14: `jobs_task_fetch_idx`, built concurrently) beside a worker of d34684f: the
 * index is built under the old worker's running job and its claims of a backlog, and both
 * versions go on claiming, each job once.
 */
describe('upgrading to migration 14 (jobs_task_fetch_idx) while a worker of the previous version drains', () => {
  const u = upgradeSetup('upgrade_task_fetch', GROUPS_VERSION);

  it('builds the index under running jobs and claims; old and new workers drain the backlog, each job once', async () => {
    const logs = await drainBesideOldWorker(u, {
      oldThrough: 'JobGroups1764900000000',
      newMigration: 'TaskFetchIndex1765000000000',
      afterMigration: async () => assert.deepEqual(await u.q(`select indisvalid as valid from pg_index where indexrelid = 'job_queue.jobs_task_fetch_idx'::regclass`), [{ valid: true }]),
    });
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
