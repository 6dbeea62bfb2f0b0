import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { connect, createTestDatabase } from '../support/database';
import { waitFor, waitForNoJobs, waitForValue } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses } from '../support/worker-processes';

describe('worker processes', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('processes');
    sql = await connect(db.url);
    await sql.query('create table runs (job_id bigint not null, pid int not null, attempt int not null)');
  });
  afterEach(() => stopWorkerProcesses());
  after(async () => {
    await sql.end();
    await db.drop();
  });

  it('three processes drain thousands of jobs, each exactly once, and stop cleanly on SIGTERM', async () => {
    // booting together, they create the tables once (migrations under an advisory lock)
    const workers = await startWorkerProcesses(3, { url: db.url, concurrency: 5 });
    await waitForValue(sql, 'three registered workers', 'select count(*)::int from job_queue.workers', 3);
    const total = 3000;
    await sql.query(`select job_queue.add_job('record', jsonb_build_object('n', n)) from generate_series(1, $1) n`, [total]);
    await waitForNoJobs(sql);

    const { rows: [runs] } = await sql.query('select count(*)::int as runs, count(distinct job_id)::int as jobs, count(distinct pid)::int as pids from runs');
    assert.deepEqual(runs, { runs: total, jobs: total, pids: 3 });

    const exits = await Promise.all(workers.map((w) => w.terminate()));
    // Nest closes the app, then re-raises the signal so the process ends as a SIGTERM would
    assert.deepEqual(exits, workers.map(() => ({ code: null, signal: 'SIGTERM' })));
    assert.equal((await sql.query('select count(*)::int as n from job_queue.workers')).rows[0].n, 0, 'every worker unregistered');
  });

  it('a worker frozen with SIGSTOP holds only what it claimed; the other drains the rest, and after SIGCONT every job has run once', async () => {
    await sql.query('truncate runs');
    const [frozen, other] = await startWorkerProcesses(2, { url: db.url, concurrency: 2 });
    // the first sleeps land on the first worker to claim; freeze whichever holds one
    await sql.query(`select job_queue.add_job('sleep', '{"ms": 4000}') from generate_series(1, 2)`);
    await waitFor('a worker to start a sleep', () => /started sleep/.test(frozen.output + other.output));
    const [paused, running] = /started sleep/.test(frozen.output) ? [frozen, other] : [other, frozen];
    paused.pause();
    assert.doesNotMatch(paused.output, /finished sleep/, 'frozen in the middle of its job');
    const total = 300;
    await sql.query(`select job_queue.add_job('record', jsonb_build_object('n', n)) from generate_series(1, $1) n`, [total]);
    await waitForValue(sql, 'the running worker to drain the record jobs', `select count(*)::int from job_queue.jobs where task_identifier = 'record'`, 0);
    const byPid = (await sql.query('select pid, count(*)::int as n from runs group by pid')).rows;
    assert.deepEqual(byPid, [{ pid: running.pid, n: total }], 'only the running worker ran them');
    paused.resume();
    await waitForNoJobs(sql);
    assert.equal((await sql.query('select count(*)::int as n from runs')).rows[0].n, total);
    assert.match(paused.output, /finished sleep/, 'the frozen worker finished its job after SIGCONT');
    const sleeps = [...(paused.output + running.output).matchAll(/started sleep (\d+)/g)].map((m) => m[1]);
    assert.equal(new Set(sleeps).size, 2, `each sleep job started once: ${sleeps}`);
    assert.equal(sleeps.length, 2, `each sleep job started once: ${sleeps}`);
    await Promise.all([paused.terminate(), running.terminate()]);
  });

  it('a worker process that crashes fails the test at once, showing its output', async () => {
    const unreachable = 'postgres://nobody@127.0.0.1:1/none';
    await assert.rejects(startWorkerProcesses(1, { url: unreachable }), (error: Error) => {
      assert.match(error.message, /exited by itself \(code 1, signal null\); its output:/);
      assert.match(error.message, /ECONNREFUSED/, 'the child\'s own error is shown');
      return true;
    });
    await assert.rejects(stopWorkerProcesses(), /exited by itself/, 'and the cleanup reports it too');
  });
});
