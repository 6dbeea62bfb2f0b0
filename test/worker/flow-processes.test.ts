import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitForValue } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses } from '../support/worker-processes';

describe('flows across worker processes', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let producer: TestApp;

  before(async () => {
    db = await createTestDatabase('flow_processes');
    sql = await connect(db.url);
    await sql.query(`create table flow_runs (job_id bigint not null, flow_id bigint not null, ref text, pid int not null, attempt int not null,
      dependencies jsonb not null, started_at timestamptz not null, ended_at timestamptz)`);
    producer = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: ['flow-step'] } });
  });
  afterEach(() => stopWorkerProcesses());
  after(async () => {
    await producer?.close();
    await sql.end();
    await db.drop();
  });

  it('diamonds across 3 processes: each join starts after both branches ended and committed, sees their results, and every job runs once', async () => {
    await startWorkerProcesses(3, { url: db.url, concurrency: 4 });
    await waitForValue(sql, 'three registered workers', 'select count(*)::int from job_queue.workers', 3);
    const step = (ref: string, dependsOn: string[] = [], ms = 0) => ({ ref, identifier: 'flow-step', payload: { ms }, dependsOn });
    const flows = await Promise.all(
      Array.from({ length: 30 }, (_, i) => producer.jobs.addFlow([step('root'), step('left', ['root'], i % 3), step('right', ['root'], (i + 1) % 3), step('join', ['left', 'right'])])),
    );
    const results = await Promise.all(flows.map((flow) => producer.jobs.waitForFlow(flow.flowId, { timeout: 60_000 })));
    assert.equal(results.length, 30);

    const { rows: [counts] } = await sql.query('select count(*)::int as runs, count(distinct job_id)::int as jobs, count(distinct pid)::int as pids from flow_runs');
    assert.deepEqual({ runs: counts.runs, jobs: counts.jobs }, { runs: 120, jobs: 120 }, 'every job ran exactly once');
    assert.equal(counts.pids, 3, 'all three processes ran steps');

    // each join started after both its branches ended, and read both results as they committed
    const { rows: joins } = await sql.query(`
      select j.flow_id, j.dependencies, j.started_at > l.ended_at and j.started_at > r.ended_at as after_both, l.pid as left_pid, r.pid as right_pid
      from flow_runs j
      join flow_runs l on l.flow_id = j.flow_id and l.ref = 'left'
      join flow_runs r on r.flow_id = j.flow_id and r.ref = 'right'
      where j.ref = 'join'`);
    assert.equal(joins.length, 30);
    for (const join of joins) {
      assert.equal(join.after_both, true, `flow ${join.flow_id}: the join started after both branches ended`);
      assert.deepEqual(join.dependencies, {
        left: { state: 'completed', result: { ref: 'left', pid: join.left_pid } },
        right: { state: 'completed', result: { ref: 'right', pid: join.right_pid } },
      });
    }
    const { rows: [left] } = await sql.query(`select (select count(*) from job_queue.blocked_jobs)::int as blocked, (select count(*) from job_queue.flows where state <> 'completed')::int as unfinished`);
    assert.deepEqual(left, { blocked: 0, unfinished: 0 });
  });
});
