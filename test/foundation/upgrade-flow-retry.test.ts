import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp } from '../support/app';
import { FLOW_SETTLE_LINEAR_VERSION, OldWorkerProcess } from '../support/previous-version';
import { assertFlowSettled, flowState, migrationNames, migrationsThrough, recordStep as record, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const HOUR = 3_600_000;

/**
 * A rolling deploy of migration 18 (FlowRetryKeepsFailures1765400000000: retryJobs brings back
 * only the dependents whose `fail` dependencies all come back) beside a worker of bf115f1, which
 * runs every job. A flow's two dependencies of a join were cancelled before the deploy (the
 * join, its dependent and a job of the first alone failed with them). After it, the new
 * version, with no worker of its own, retries the first: the old worker runs it and the job of
 * its own, and the join stays failed; then the second: the old worker runs it, the join and its
 * dependent, each once.
 */
describe('upgrading to migration 18 (a retry keeps failed what another failure still fails) beside a worker of the previous version', () => {
  const u = upgradeSetup('upgrade_flow_retry', FLOW_SETTLE_LINEAR_VERSION);
  const { q } = u;

  it("the old worker's releases after retries run a `fail` dependent only once all its failed dependencies came back", async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, migrationsThrough('FlowSettleLinear1765300000000'), 'the old version has every migration through 17');
    const later = new Date(Date.now() + HOUR).toISOString();
    const flowId = await old.addFlow([
      record('a', [], { runAt: later }),
      record('b', [], { runAt: later }),
      record('join', ['a', 'b']),
      record('after', ['join']),
      record('aside', ['a']),
    ]);
    const job = async (ref: string) =>
      (await q<{ id: string; state: string }>(
        `select id::text, 'waiting' as state from job_queue.jobs where flow_id = $1 and flow_ref = $2
         union all select id::text, 'blocked' from job_queue.blocked_jobs where flow_id = $1 and flow_ref = $2
         union all select id::text, state from job_queue.finished_jobs where flow_id = $1 and flow_ref = $2`,
        [flowId, ref],
      ))[0];
    for (const ref of ['a', 'b']) await q('select job_queue.cancel_job($1, $2)', [(await job(ref)).id, 'before the deploy']);
    await waitFor('the flow to end, cancelled', async () => ['cancelled', 'failed'].includes((await flowState(u, flowId)) ?? ''), 30_000);
    const states = async () => Object.fromEntries(await Promise.all(['a', 'b', 'join', 'after', 'aside'].map(async (ref) => [ref, (await job(ref)).state])));
    assert.deepEqual(await states(), { a: 'cancelled', b: 'cancelled', join: 'failed', after: 'failed', aside: 'failed' });

    const { logger, logs } = warningsLogger();
    u.app = await createTestApp({ url: u.db.url, providers: [], logger, jobQueue: { worker: false } });
    assert.ok((await migrationNames(u.sql)).includes('FlowRetryKeepsFailures1765400000000'), 'migration 18 applied');

    await u.app.jobs.retryJobs([(await job('a')).id]);
    await waitFor('the flow to end again', async () => (await flowState(u, flowId)) === 'failed', 30_000);
    assert.deepEqual(await states(), { a: 'completed', b: 'cancelled', join: 'failed', after: 'failed', aside: 'completed' }, 'b being cancelled still, the join and its dependent stayed failed');

    await u.app.jobs.retryJobs([(await job('b')).id]);
    await waitFor('the flow to complete', async () => (await flowState(u, flowId)) === 'completed', 30_000);
    assert.deepEqual(await states(), { a: 'completed', b: 'completed', join: 'completed', after: 'completed', aside: 'completed' });
    const runs = await q<{ ref: string; pid: number }>(`select r.payload->>'ref' as ref, r.pid from runs r order by 1`);
    assert.deepEqual(runs.map((run) => run.ref), ['a', 'after', 'aside', 'b', 'join'], 'each job ran once');
    assert.ok(runs.every((run) => run.pid === old.pid), 'all by the old worker');
    await assertFlowSettled(u, flowId);
    await old.terminate();
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
