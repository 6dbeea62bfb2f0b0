import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp } from '../support/app';
import { LIMITS_VERSION, OldWorkerProcess } from '../support/previous-version';
import { limitedHoldTasks, migrationNames, NewTasks, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const NEW_MIGRATION = 'JobGroups1764900000000';

/** The new version's `hold`, limited as the test says, and `marker`. */
const GroupedNewTasks = limitedHoldTasks({ groupConcurrency: 1 });

/**
 * A rolling deploy of the release with limits per group (migration 13: `jobs.group_key`,
 * `add_grouped_job()`) beside a worker of 3209aae, which knows nothing of groups
 * (docs/guides/limits.md, "During a rolling deploy"): the migration applies under its running
 * jobs; it claims grouped jobs as any other, beyond a group's limit; the new worker counts what
 * it holds, so it starts none of that group while the old one holds the limit or more; the old
 * version's keyed adds (add_job) still work, and a new keyed add moves such a job into a group.
 */
describe('limits per group beside a worker of the previous version', () => {
  const u = upgradeSetup('upgrade_groups', LIMITS_VERSION);
  const { q } = u;

  it('an old worker ignores a group limit; new workers add nothing to the excess; adds of both versions work', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    // Running on the old worker while the migration applies.
    const [running] = await old.add([{ identifier: 'hold', payload: { gate: 'g0' } }]);
    await old.waitForOutput(`started hold ${running}`, new RegExp(`^started hold ${running}$`, 'm'));

    // The new version migrates without a worker, and adds three jobs of one group: the old worker claims them all.
    const adder = await createTestApp({ url: u.db.url, providers: [NewTasks, GroupedNewTasks], jobQueue: { worker: false } });
    assert.ok((await migrationNames(u.sql)).includes(NEW_MIGRATION), `${NEW_MIGRATION} applied`);
    const first = (await adder.jobs.addMany([1, 2, 3].map((n) => ({ identifier: 'hold' as never, payload: { gate: 'g1', n } as never, group: 'acme' })))).map((job) => job.id);
    await adder.close();
    for (const id of first.slice(0, 2)) await old.waitForOutput(`started hold ${id}`, new RegExp(`^started hold ${id}$`, 'm'));
    const held = async () => (await q<{ n: number }>(`select count(*)::int as n from job_queue.jobs where group_key = 'acme' and locked_by is not null`))[0].n;
    assert.ok((await held()) >= 2, 'the old worker holds more of the group than its limit of 1');

    const { logger, logs } = warningsLogger();
    const t = (u.app = await createTestApp({ url: u.db.url, providers: [NewTasks, GroupedNewTasks], logger, jobQueue: { pollInterval: 200, concurrency: 4 } }));
    const later = (await t.jobs.addMany([4, 5].map((n) => ({ identifier: 'hold' as never, payload: { gate: 'g1', n } as never, group: 'acme' })))).map((job) => job.id);
    const [marker] = await t.jobs.addMany([{ identifier: 'marker' as never, payload: {} as never }]);
    await waitFor('the new worker to run a job added after the grouped ones', async () => (await q('select 1 from runs where job_id = $1', [marker.id])).length === 1);
    assert.deepEqual(await q(`select job_id from runs where task = 'hold' and pid = $1`, [process.pid]), [], 'the new worker started no job of the group while the old one held its limit');

    // Keyed adds: the old version's add_job on the new table, then the new version's replace into a group.
    const [keyed] = await old.add([{ identifier: 'record', payload: { by: 'old' }, jobKey: 'k1', runAt: new Date(Date.now() + 3_600_000).toISOString() }]);
    const replaced = await t.jobs.add('record' as never, { by: 'new' } as never, { jobKey: 'k1', group: 'acme', runAt: new Date(Date.now() + 3_600_000) });
    assert.equal(replaced.id, keyed);
    assert.deepEqual(await q('select group_key, payload from job_queue.jobs where id = $1', [keyed]), [{ group_key: 'acme', payload: { by: 'new' } }]);

    await old.open('g0');
    await old.open('g1');
    const all = [running, ...first, ...later];
    await waitFor('every hold job to run', async () => (await q('select 1 from runs where job_id = any($1::bigint[])', [all])).length === all.length, 30_000);
    assert.deepEqual(await q('select job_id from runs where job_id = any($1::bigint[]) group by job_id having count(*) > 1', [all]), [], 'each ran once');
    await old.terminate();
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
