import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp } from '../support/app';
import { FLOWS_VERSION, FLOWS_VERSION_MIGRATIONS, OldWorkerProcess } from '../support/previous-version';
import { limitedHoldTasks, migrationNames, NewTasks, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const MIGRATIONS = [
  ...FLOWS_VERSION_MIGRATIONS,
  'JobCounts1764500000000',
  'Pauses1764600000000',
  'Schedules1764700000000',
  'TaskLimits1764800000000',
  'JobGroups1764900000000',
  'TaskFetchIndex1765000000000',
  'JobsVacuumTruncate1765100000000',
  'FlowAddOnce1765200000000',
  'FlowSettleLinear1765300000000',
  'FlowRetryKeepsFailures1765400000000',
  'FlowEdgeStatistics1765500000000',
];

/** The new version's `hold`, limited as the test says, and `marker`. */
const LimitedNewTasks = limitedHoldTasks({ globalConcurrency: 1 });

/**
 * A rolling deploy of the release with concurrency limits beside a worker of 1572e48, which
 * knows nothing of them (docs/guides/limits.md, "During a rolling deploy"): the old worker
 * claims a limited task's jobs beyond the limit; the new worker counts the jobs the old one
 * holds, so it starts none of them while the old one holds the limit or more, and runs the
 * rest once the old worker's jobs end.
 */
describe('concurrency limits beside a worker of the previous version', () => {
  const u = upgradeSetup('upgrade_limits', FLOWS_VERSION);
  const { q } = u;

  it("an old worker ignores a task's globalConcurrency; new workers add nothing to the excess", async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    const first = await old.add([1, 2, 3].map((n) => ({ identifier: 'hold', payload: { gate: 'g1', n } })));
    for (const id of first) await old.waitForOutput(`started hold ${id}`, new RegExp(`^started hold ${id}$`, 'm'));

    const { logger, logs } = warningsLogger();
    const t = (u.app = await createTestApp({ url: u.db.url, providers: [NewTasks, LimitedNewTasks], logger, jobQueue: { pollInterval: 200, concurrency: 4 } }));
    assert.deepEqual(await migrationNames(u.sql), MIGRATIONS);
    const held = async () => (await q<{ n: number }>(`select count(*)::int as n from job_queue.jobs where task_identifier = 'hold' and locked_by is not null`))[0].n;
    assert.equal(await held(), 3, 'the old worker holds 3 jobs of a task the new code limits to 1');

    const later = (await t.jobs.addMany([4, 5].map((n) => ({ identifier: 'hold', payload: { gate: 'g1', n } })))).map((job) => job.id);
    const [marker] = await t.jobs.addMany([{ identifier: 'marker' as never, payload: {} as never }]);
    await waitFor('the new worker to run a job added after the limited ones', async () => (await q('select 1 from runs where job_id = $1', [marker.id])).length === 1);
    assert.deepEqual(await q(`select job_id from runs where task = 'hold' and pid = $1`, [process.pid]), [], 'the new worker started no limited job while the old one held the limit');

    await old.open('g1');
    const all = [...first, ...later];
    await waitFor('every hold job to run', async () => (await q('select 1 from runs where job_id = any($1::bigint[])', [all])).length === all.length);
    const byPid = await q<{ pid: number; n: number }>('select pid, count(*)::int as n from runs where job_id = any($1::bigint[]) group by pid order by pid', [first]);
    assert.deepEqual(byPid, [{ pid: old.pid, n: 3 }], 'the old worker ran its three at once');
    await old.terminate();
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
