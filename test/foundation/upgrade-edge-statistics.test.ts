import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp } from '../support/app';
import { FLOW_RETRY_VERSION, OldWorkerProcess } from '../support/previous-version';
import { assertFlowSettled, flowState, migrationNames, migrationsThrough, recordStep as step, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const HOUR = 3_600_000;
const WIDTH = 300;

/**
 * A rolling deploy of migration 19 (FlowEdgeStatistics1765500000000: the planner told the shape
 * of `job_dependencies`' keys, then an ANALYZE) beside a worker of ff92997, which runs every job.
 * A 1 → 300 → 1 fan with a job beside it that fails for good, and that job's dependent, is added
 * before the deploy, held at its root. After it, the old worker runs the flow through the
 * functions the migration's statistics now plan: each job once, the failure carried down.
 */
describe('upgrading to migration 19 (the statistics of the flow edges) beside a worker of the previous version', () => {
  const u = upgradeSetup('upgrade_edge_statistics', FLOW_RETRY_VERSION);
  const { q } = u;

  it('the old worker settles a wide flow after the migration: every job once, the failure carried down, the statistics as set', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, migrationsThrough('FlowRetryKeepsFailures1765400000000'), 'the old version has every migration through 18');
    const middles = Array.from({ length: WIDTH }, (_, i) => `m${i}`);
    const flowId = await old.addFlow([
      step('root', [], { runAt: new Date(Date.now() + HOUR).toISOString() }),
      ...middles.map((ref) => step(ref, ['root'])),
      step('join', middles),
      step('broken', ['root'], { identifier: 'fail', maxAttempts: 1 }),
      step('after', ['broken']),
    ]);
    const [added] = await q<{ edges: number }>('select count(*)::int as edges from job_queue.job_dependencies where flow_id = $1', [flowId]);
    assert.equal(added.edges, 2 * WIDTH + 2, 'the flow is in, held at its root');

    const { logger, logs } = warningsLogger();
    u.app = await createTestApp({ url: u.db.url, providers: [], logger, jobQueue: { worker: false } });
    assert.ok((await migrationNames(u.sql)).includes('FlowEdgeStatistics1765500000000'), 'migration 19 applied');
    const stats = await q<{ attname: string; n_distinct: number }>(
      `select attname, n_distinct from pg_stats where schemaname = 'job_queue' and tablename = 'job_dependencies' and attname in ('dependency_id', 'job_id') order by attname`,
    );
    assert.deepEqual(stats, [
      { attname: 'dependency_id', n_distinct: -0.5 },
      { attname: 'job_id', n_distinct: -0.5 },
    ], 'the migration analyzed the edges with the shares it set');

    await q(`update job_queue.jobs set run_at = now() where flow_id = $1 and flow_ref = 'root'`, [flowId]);
    await waitFor('the flow to end', async () => (await flowState(u, flowId)) !== 'running', 60_000);
    assert.equal(await flowState(u, flowId), 'failed', 'broken failed for good, and its dependent with it');

    const runs = await q<{ ref: string; runs: number; pids: number[] }>(`select r.payload->>'ref' as ref, count(*)::int as runs, array_agg(distinct r.pid) as pids from runs r group by 1`);
    assert.equal(runs.length, WIDTH + 3, `every job ran but 'after': ${runs.map((run) => run.ref).join(', ')}`);
    assert.ok(!runs.some((run) => run.ref === 'after'), "'after' never ran");
    assert.ok(runs.every((run) => run.runs === 1), `each once: ${JSON.stringify(runs.filter((run) => run.runs !== 1))}`);
    assert.ok(runs.every((run) => run.pids.length === 1 && run.pids[0] === old.pid), 'all by the old worker');
    const finished = await q<{ ref: string; state: string; last_error: string | null }>(
      `select flow_ref as ref, state, last_error from job_queue.finished_jobs where flow_id = $1 and flow_ref in ('join', 'broken', 'after') order by flow_ref`,
      [flowId],
    );
    assert.deepEqual(
      finished.map((job) => [job.ref, job.state]),
      [
        ['after', 'failed'],
        ['broken', 'failed'],
        ['join', 'completed'],
      ],
    );
    assert.match(finished[0].last_error ?? '', /^JQ_DEPENDENCY_FAILED: broken failed/);
    await assertFlowSettled(u, flowId);
    await old.terminate();
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
