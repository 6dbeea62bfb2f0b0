import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp, type TestApp } from '../support/app';
import { EVENTS_VERSION, OldWorkerProcess } from '../support/previous-version';
import { assertEachRanOnce, migrationNames, migrationsAfter, NewTasks, printed, queuesHeadedBySleeps, type Run, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitForValue } from '../support/wait';

const OLD_MIGRATIONS = [
  'CreateJobTables1763700000000',
  'RecoveryAndQueueOrder1763800000000',
  'JobLifecycle1763900000000',
  'Operations1764000000000',
  'ClaimByQueueHeads1764100000000',
  'EventListeners1764200000000',
];

/**
 * A rolling deploy of the release that adds flows (migration 7: blocked_jobs, the edges, the
 * flows and the trigger that settles them) while a worker of the previous release (9ca3c3e,
 * migrations 1–6) runs. Blocked jobs live apart from `jobs`, so the old worker's claims can
 * never take one; a flow job the old worker finishes loses its flow columns in finished_jobs,
 * and the new workers' flow sweep settles its dependents, gives it back its flow (by the edges
 * that name it) and counts its flow again.
 */
describe('upgrading to migration 7 while workers of the previous version run', () => {
  const u = upgradeSetup('upgrade_flows', EVENTS_VERSION);
  const { q } = u;
  let t: TestApp | undefined;

  it('old workers never claim a blocked job; flows complete, each job once, with steps run by old and new workers', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, OLD_MIGRATIONS, `the library of ${EVENTS_VERSION} knows six migrations`);
    const before = await old.add(Array.from({ length: 20 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before', n } })));
    await waitForValue(u.sql, 'the old worker to run its first jobs', `select count(*)::int from runs where job_id = any($1::bigint[])`, 20, [before]);
    // two named queues whose heads the old worker holds across the migration
    const { sleeps, queued } = await queuesHeadedBySleeps(u, 3_000);
    for (const id of sleeps) await printed(old, `started sleep ${id}`);

    // the new code migrates beside it; 'old-only' steps run on the old worker alone, 'new-only' on the new one
    const { logger, logs } = warningsLogger();
    t = u.app = await createTestApp({
      url: u.db.url,
      providers: [NewTasks],
      logger,
      jobQueue: { pollInterval: 200, concurrency: 4, forbiddenFlags: ['old-only'], heartbeatInterval: 500, workerTimeout: 3_000 },
    });
    assert.deepEqual(await migrationNames(u.sql), [...OLD_MIGRATIONS, 'Flows1764300000000', ...migrationsAfter('Flows1764300000000')]);

    // ten flows whose root waits an hour: their other steps stay blocked
    const later = new Date(Date.now() + 3_600_000);
    const flows = await Promise.all(
      Array.from({ length: 10 }, (_, n) =>
        t!.jobs.addFlow([
          { ref: 'root', identifier: 'record', payload: { flow: n, ref: 'root' }, runAt: later },
          { ref: 'a', identifier: 'record', payload: { flow: n, ref: 'a' }, dependsOn: ['root'], flags: ['old-only'] },
          { ref: 'b', identifier: 'record', payload: { flow: n, ref: 'b' }, dependsOn: ['root'], flags: ['new-only'] },
          { ref: 'join', identifier: 'record', payload: { flow: n, ref: 'join' }, dependsOn: ['a', 'b'], flags: ['old-only'] },
        ]),
      ),
    );
    const blocked = flows.flatMap((flow) => [flow.jobs.a.id, flow.jobs.b.id, flow.jobs.join.id]);
    // the old worker claims on (these jobs run after the flows exist) and takes none of the blocked jobs
    const meanwhile = await old.add(Array.from({ length: 30 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after', n }, flags: ['old-only'] })));
    await waitForValue(u.sql, 'the old worker to run the jobs added after the flows', `select count(*)::int from runs where job_id = any($1::bigint[])`, 30, [meanwhile]);
    assert.deepEqual(await q(`select count(*)::int as n from runs where job_id = any($1::bigint[])`, [blocked]), [{ n: 0 }], 'no blocked job ran');
    assert.deepEqual(await q(`select count(*)::int as n from job_queue.blocked_jobs`), [{ n: 30 }]);

    // the roots completed from outside: a runs on the old worker, b on the new one, then the join on the old one
    await t.jobs.completeJobs(flows.map((flow) => flow.jobs.root.id), { result: { approved: true } });
    const results = await Promise.all(flows.map((flow) => t!.jobs.waitForFlow(flow.flowId, { timeout: 60_000 })));
    assert.deepEqual(results[0], { root: { approved: true }, a: null, b: null, join: null });

    const runs = await q<Run>('select job_id::text, pid, attempt, task, payload, at from runs order by n');
    await waitForValue(u.sql, 'the queues to drain', 'select count(*)::int from job_queue.jobs', 0);
    assertEachRanOnce(await q<Run>('select job_id::text, pid, attempt, task, payload, at from runs order by n'), [...before, ...sleeps, ...queued, ...meanwhile, ...blocked]);
    const ranAt = new Map(runs.map((run) => [run.job_id, run]));
    for (const flow of flows) {
      assert.equal(ranAt.get(flow.jobs.a.id)!.pid, old.pid, 'a ran on the old worker');
      assert.equal(ranAt.get(flow.jobs.b.id)!.pid, process.pid, 'b ran on the new worker');
      assert.equal(ranAt.get(flow.jobs.join.id)!.pid, old.pid, 'the join ran on the old worker');
      const join = ranAt.get(flow.jobs.join.id)!.at.getTime();
      assert.ok(join > ranAt.get(flow.jobs.a.id)!.at.getTime() && join > ranAt.get(flow.jobs.b.id)!.at.getTime(), 'the join ran after both');
    }
    assert.deepEqual(await q(`select state, count(*)::int as n from job_queue.flows group by state`), [{ state: 'completed', n: 10 }]);
    // what the old worker finished lost its flow columns; the sweep gave them back (by the edges)
    for (const flow of flows) {
      const read = await t.jobs.getFlow(flow.flowId);
      assert.deepEqual(read?.jobs.map((job) => [job.flowRef, job.state]), [['root', 'completed'], ['a', 'completed'], ['b', 'completed'], ['join', 'completed']]);
    }
    assert.doesNotMatch(old.output, /failed, retrying|add failed|Error/, 'the old worker reported no error');
    assert.deepEqual(logs, [], 'the new app neither warned nor erred');
    assert.deepEqual(await old.terminate(), { code: null, signal: 'SIGTERM' });
  });
});
