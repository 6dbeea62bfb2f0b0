import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp } from '../support/app';
import { OldWorkerProcess, VACUUM_TRUNCATE_VERSION } from '../support/previous-version';
import { migrationNames, migrationsThrough, NewTasks, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

/** A diamond of `record` steps: root, then left and right, then join after both. */
const diamond = (tag: string): Array<{ ref: string; identifier: string; payload: object; dependsOn?: string[] }> => [
  { ref: 'root', identifier: 'record', payload: { tag, ref: 'root' } },
  { ref: 'left', identifier: 'record', payload: { tag, ref: 'left' }, dependsOn: ['root'] },
  { ref: 'right', identifier: 'record', payload: { tag, ref: 'right' }, dependsOn: ['root'] },
  { ref: 'join', identifier: 'record', payload: { tag, ref: 'join' }, dependsOn: ['left', 'right'] },
];

/**
 * A rolling deploy of migration 16 (FlowAddOnce1765200000000: addFlow calls add_flow_unchecked,
 * add_flow checks and then calls it) beside a worker of c08b82e, whose addFlow calls add_flow
 * and has it prepared from before the migration: flows added by either version before and after
 * it complete, each job once and the join after both branches, and add_flow still refuses a bad
 * flow from SQL.
 */
describe('upgrading to migration 16 (a flow added once) beside a worker of the previous version', () => {
  const u = upgradeSetup('upgrade_flow_add', VACUUM_TRUNCATE_VERSION);
  const { q } = u;

  it('flows added by the old version through add_flow and by the new one through add_flow_unchecked all complete, each job once', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, migrationsThrough('JobsVacuumTruncate1765100000000'), 'the old version has every migration through 15');
    const completed = async (flowId: string) => (await q<{ state: string }>('select state from job_queue.flows where id = $1', [flowId]))[0]?.state === 'completed';
    const before = await old.addFlow(diamond('before'));
    await waitFor('the flow the old version added before the migration to complete', () => completed(before), 30_000);

    const { logger, logs } = warningsLogger();
    const t = (u.app = await createTestApp({ url: u.db.url, providers: [NewTasks], logger, jobQueue: { pollInterval: 200, concurrency: 4 } }));
    assert.ok((await migrationNames(u.sql)).includes('FlowAddOnce1765200000000'), 'migration 16 applied');

    // The old app's add_flow, prepared on its connections before the migration, now checks and calls add_flow_unchecked.
    const oldAfter = await old.addFlow(diamond('old-after'));
    const newAfter = (await t.jobs.addFlow(diamond('new-after') as never)).flowId;
    const flows = [before, oldAfter, newAfter];
    await waitFor('every flow to complete', async () => (await Promise.all(flows.map(completed))).every(Boolean), 30_000);

    const jobs = await q<{ flow_id: string; flow_ref: string; runs: number; started: Date; finished: Date }>(
      `select f.flow_id::text, f.flow_ref, (select count(*)::int from runs r where r.job_id = f.id) as runs, f.started_at as started, f.finished_at as finished
       from job_queue.finished_jobs f where f.flow_id = any($1::bigint[]) and f.state = 'completed' order by f.flow_id, f.flow_ref`,
      [flows],
    );
    assert.deepEqual(
      jobs.map((job) => `${job.flow_id}:${job.flow_ref}:${job.runs}`),
      flows.flatMap((flowId) => ['join', 'left', 'right', 'root'].map((ref) => `${flowId}:${ref}:1`)),
      'every step of the three flows completed, each run once',
    );
    for (const flowId of flows) {
      const step = (ref: string) => jobs.find((job) => job.flow_id === flowId && job.flow_ref === ref)!;
      for (const branch of ['left', 'right']) assert.ok(step('join').started >= step(branch).finished, `flow ${flowId}: the join started after ${branch} finished`);
    }

    // add_flow from SQL still checks what it is given.
    await assert.rejects(
      u.sql.query(`select job_queue.add_flow($1::jsonb)`, [JSON.stringify([{ ref: 'a', identifier: 'record' }, { ref: 'a', identifier: 'record' }])]),
      /JQ_INVALID_FLOW: the ref a is used twice/,
    );
    await old.terminate();
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
