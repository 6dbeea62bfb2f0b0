import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import type { JobQueueEvent } from '../../libs/job-queue/src';
import { CLAIMS_APPLICATION_NAME } from '../../libs/job-queue/src/worker/claim-connection';
import { createTestApp, type TestApp } from '../support/app';
import { listenerPids, terminateConnections } from '../support/connections';
import { connect, createTestDatabase } from '../support/database';
import { countingTask } from '../support/tasks';
import { waitFor, waitForNoJobs } from '../support/wait';

// 2,000 jobs drain in about two seconds: the kills land mid-drain
const { provider: FaultTasks, runs } = countingTask('work', { delayMs: 10 });

describe('connection faults', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp;
  const events: JobQueueEvent[] = [];

  before(async () => {
    db = await createTestDatabase('faults');
    sql = await connect(db.url);
    // a poll interval far longer than the test: only a notification can wake the worker (and
    // no job of this app starts without one: localStart off)
    t = await createTestApp({ url: db.url, providers: [FaultTasks], jobQueue: { pollInterval: 600_000, localStart: false } });
    t.worker.events$.subscribe((e) => events.push(e));
  });
  after(async () => {
    await sql.end();
    await t.close();
    await db.drop();
  });

  it('a killed LISTEN connection is re-established and notifications wake the worker again', async () => {
    await waitFor('the LISTEN connection', async () => (await listenerPids(sql)).length === 1);
    const [before] = await listenerPids(sql);
    assert.equal(await terminateConnections(sql, 'pid = $1', [before]), 1);
    await waitFor('the worker to notice', () => events.some((e) => e.type === 'worker:error' && e.during === 'listen'));
    await waitFor('a new LISTEN connection', async () => (await listenerPids(sql)).some((pid) => pid !== before));
    // the first job may be run by the catch-up wake that follows a reconnect; the second only by its NOTIFY
    const first = await t.jobs.add('work');
    await waitFor('the first job to run', () => runs.get(first.id) === 1);
    const second = await t.jobs.add('work');
    await waitFor('the second job to run, woken by its notification', () => runs.get(second.id) === 1);
  });

  it('a claim connection killed while idle is replaced at the next claim', async () => {
    const claimPids = async () =>
      (await sql.query(`select pid from pg_stat_activity where application_name = $1`, [CLAIMS_APPLICATION_NAME])).rows.map((r) => r.pid as number);
    const warmUp = await t.jobs.add('work');
    await waitFor('a job to run', () => runs.get(warmUp.id) === 1);
    const [before] = await claimPids();
    assert.ok(before, 'the worker has its claim connection');
    assert.equal(await terminateConnections(sql, 'pid = $1', [before]), 1);
    await waitFor('the claim connection to be gone', async () => !(await claimPids()).includes(before));
    const job = await t.jobs.add('work');
    await waitFor('the job to run', () => runs.get(job.id) === 1);
    const after = await claimPids();
    assert.equal(after.length, 1);
    assert.notEqual(after[0], before, 'a new connection');
  });

  it('claims and releases survive their connections being killed: no job lost or run twice', async () => {
    const ranBefore = runs.size;
    const jobs = await t.jobs.addMany(Array.from({ length: 2000 }, () => ({ identifier: 'work' })));
    // kill every connection of the app's pool five times while it drains, a hundred jobs apart
    for (const ran of [1, 100, 200, 300, 400]) {
      await waitFor(`${ran} jobs to run`, () => runs.size - ranBefore >= ran);
      assert.ok(runs.size - ranBefore < jobs.length, `the drain was still under way at kill ${ran}`);
      assert.ok((await terminateConnections(sql)) > 0, 'the app had connections to kill');
    }
    await waitForNoJobs(sql);
    for (const job of jobs) assert.equal(runs.get(job.id), 1, `job ${job.id} ran once`);
  });
});
