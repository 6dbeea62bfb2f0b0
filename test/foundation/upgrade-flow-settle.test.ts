import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp } from '../support/app';
import { FLOW_ADD_ONCE_VERSION, OldWorkerProcess } from '../support/previous-version';
import { migrationNames, migrationsThrough, NewTasks, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const WIDTH = 300;
const mids = (prefix: string) => Array.from({ length: WIDTH }, (_, i) => `${prefix}${i}`);

/**
 * A rolling deploy of migration 17 (FlowSettleLinear1765300000000: settle_flow_jobs in time
 * proportional to the dependents it touches) beside a worker of 7f03fc7. The old worker holds the
 * roots of two flows across the migration; their releases, by the old code, settle through the
 * new function: one root completes and unblocks 300 jobs, then a join of all 300; the other
 * fails for good and fails its `fail` dependents down the graph, while a `continue` and an
 * `ignore` dependent run.
 */
describe('upgrading to migration 17 (flows settled in linear time) beside a worker of the previous version', () => {
  const u = upgradeSetup('upgrade_flow_settle', FLOW_ADD_ONCE_VERSION);
  const { q } = u;

  it('flows whose roots the old worker releases after the migration unblock, fail and complete as before', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, migrationsThrough('FlowAddOnce1765200000000'), 'the old version has every migration through 16');
    const fan = await old.addFlow([
      { ref: 'root', identifier: 'hold', payload: { gate: 'roots', ref: 'root' } },
      ...mids('m').map((ref) => ({ ref, identifier: 'record', payload: { ref }, dependsOn: ['root'] })),
      { ref: 'join', identifier: 'record', payload: { ref: 'join' }, dependsOn: mids('m') },
    ]);
    const failing = await old.addFlow([
      { ref: 'root', identifier: 'hold', payload: { gate: 'roots', ref: 'root', fail: 'the root fails' }, maxAttempts: 1 },
      ...mids('d').map((ref) => ({ ref, identifier: 'record', payload: { ref }, dependsOn: ['root'] })),
      { ref: 'join', identifier: 'record', payload: { ref: 'join' }, dependsOn: mids('d') },
      { ref: 'watch', identifier: 'record', payload: { ref: 'watch' }, dependsOn: ['root'], onDependencyFailure: 'continue' },
      { ref: 'tail', identifier: 'record', payload: { ref: 'tail' }, dependsOn: ['join'], onDependencyFailure: 'ignore' },
    ]);
    // a flow's id is its root's (its first job)
    for (const root of [fan, failing]) await old.waitForOutput(`started hold ${root}`, new RegExp(`^started hold ${root}$`, 'm'));

    const { logger, logs } = warningsLogger();
    u.app = await createTestApp({ url: u.db.url, providers: [NewTasks], logger, jobQueue: { pollInterval: 200, concurrency: 4 } });
    assert.ok((await migrationNames(u.sql)).includes('FlowSettleLinear1765300000000'), 'migration 17 applied');
    await old.open('roots');

    const state = async (flowId: string) => (await q<{ state: string }>('select state from job_queue.flows where id = $1', [flowId]))[0]?.state;
    await waitFor('both flows to end', async () => (await state(fan)) === 'completed' && (await state(failing)) === 'failed', 60_000);

    const jobs = await q<{ flow_id: string; ref: string; state: string; last_error: string | null; runs: number; started: Date | null; finished: Date }>(
      `select f.flow_id::text, f.flow_ref as ref, f.state, f.last_error, (select count(*)::int from runs r where r.job_id = f.id) as runs,
         f.started_at as started, f.finished_at as finished
       from job_queue.finished_jobs f where f.flow_id = any($1::bigint[])`,
      [[fan, failing]],
    );
    const of = (flowId: string) => new Map(jobs.filter((job) => job.flow_id === flowId).map((job) => [job.ref, job]));
    const fanJobs = of(fan);
    assert.equal(fanJobs.size, WIDTH + 2, 'every job of the fan finished');
    assert.deepEqual([...fanJobs.values()].filter((job) => job.state !== 'completed' || job.runs !== 1), [], 'each completed, run once');
    const join = fanJobs.get('join')!;
    for (const ref of mids('m')) assert.ok(join.started! >= fanJobs.get(ref)!.finished, `the join started after ${ref} finished`);

    const failed = of(failing);
    assert.equal(failed.size, WIDTH + 4, 'every job of the failing flow finished');
    assert.deepEqual([failed.get('root')!.state, failed.get('root')!.runs], ['failed', 1], 'the root failed for good, run once');
    for (const ref of mids('d')) {
      assert.deepEqual([failed.get(ref)!.state, failed.get(ref)!.last_error, failed.get(ref)!.runs], ['failed', 'JQ_DEPENDENCY_FAILED: root failed', 0], `${ref} failed with the root, never run`);
    }
    const joinError = `JQ_DEPENDENCY_FAILED: ${[...mids('d')].sort().map((ref) => `${ref} failed`).join(', ')}`;
    assert.deepEqual([failed.get('join')!.state, failed.get('join')!.last_error, failed.get('join')!.runs], ['failed', joinError, 0], 'the join failed down the graph, naming its dependencies');
    for (const ref of ['watch', 'tail']) assert.deepEqual([failed.get(ref)!.state, failed.get(ref)!.runs], ['completed', 1], `${ref} ran once`);

    const [left] = await q<{ blocked: number; unfinished: number }>(
      `select (select count(*)::int from job_queue.blocked_jobs) as blocked, (select coalesce(sum(unfinished), 0)::int from job_queue.flows where id = any($1::bigint[])) as unfinished`,
      [[fan, failing]],
    );
    assert.deepEqual(left, { blocked: 0, unfinished: 0 }, 'no job left blocked, both flows counted down to zero');
    await old.terminate();
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
