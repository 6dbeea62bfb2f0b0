import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { TerminusModule } from '@nestjs/terminus';
import { JobQueueDatabase } from '../../libs/job-queue/src/db/job-queue-database';
import { JobQueueHealthIndicator } from '../../libs/job-queue/src/terminus';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses, type WorkerProcess } from '../support/worker-processes';

/** The window in which paused jobs must not start while other work runs (issue 27). */
const OBSERVED_MS = 3_000;

/**
 * Pause and resume across two worker processes (test/support/worker-process.ts, PRINT_PAUSES=1:
 * each prints what its worker knows of the pauses). The test's own app adds and pauses
 * (`worker: false`). Paused: the task `nap` and the queue `held`; other work: `record` jobs.
 * Each process has read a pause before the jobs it must hold are added (its claims read the
 * pauses before they claim once told, so none that began before can see those jobs).
 */
describe('pause and resume across worker processes', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp;
  let processes: WorkerProcess[] = [];

  before(async () => {
    db = await createTestDatabase('pause');
    sql = await connect(db.url);
    t = await createTestApp({
      url: db.url,
      imports: [TerminusModule],
      providers: [JobQueueHealthIndicator],
      jobQueue: { worker: false, externalTasks: ['record', 'nap'] },
    });
    await sql.query(`create table runs (
      n bigint generated always as identity primary key, job_id bigint not null, pid int not null, attempt int not null,
      at timestamptz not null default clock_timestamp())`);
  });
  afterEach(async () => {
    for (const p of processes) await p.terminate();
    processes = [];
    await stopWorkerProcesses();
    for (const entry of await t.jobs.listPaused()) await (entry.kind === 'task' ? t.jobs.resumeTask(entry.name) : t.jobs.resumeQueue(entry.name));
  });
  after(async () => {
    await stopWorkerProcesses();
    await t?.close();
    await sql?.end();
    await db?.drop();
  });

  const start = async () => (processes = await startWorkerProcesses(2, { url: db.url, env: { PRINT_PAUSES: '1' } }));
  /** Every process knows of exactly `known` (as printPauses prints it): claims that began before cannot see jobs added after this. */
  const allKnow = async (known: string) => {
    await Promise.all(processes.map((p) => p.waitForOutput(`paused ${known}`, new RegExp(`paused ${known.replace(/[*]/g, '\\*')}\\n(?![^]*paused )`))));
  };
  const add = async (count: number, spec: (n: number) => { identifier: 'record' | 'nap'; queueName?: string }) =>
    (await t.jobs.addMany(Array.from({ length: count }, (_, n) => ({ ...spec(n), payload: spec(n).identifier === 'nap' ? { ms: 0, n } : { n } })))).map((job) => job.id);
  const ranIds = async (ids: string[]) => (await sql.query<{ job_id: string }>('select job_id::text from runs where job_id = any($1::bigint[]) order by n', [ids])).rows.map((row) => row.job_id);
  const untouched = async (ids: string[]) =>
    (await sql.query<{ n: number }>('select count(*)::int as n from job_queue.jobs where id = any($1::bigint[]) and locked_at is null and attempts = 0', [ids])).rows[0].n;
  /** Other work for OBSERVED_MS: batches of `record` jobs, each awaited until it ran (the workers claim throughout). */
  const otherWorkFor = async (ms: number) => {
    const until = Date.now() + ms;
    const ran: string[] = [];
    while (Date.now() < until) {
      const batch = await add(8, () => ({ identifier: 'record' }));
      await waitFor('a batch of other work to run', async () => (await ranIds(batch)).length === batch.length);
      ran.push(...batch);
    }
    return ran;
  };

  it('a paused queue and a paused task start nothing for 3 s while other work runs; after resume they drain, queues in order', async () => {
    await start();
    await allKnow('-');
    await t.jobs.pauseTask('nap');
    await t.jobs.pauseQueue('held');
    await allKnow('queue:held,task:nap');
    assert.deepEqual(
      (await t.jobs.listPaused()).map(({ kind, name }) => ({ kind, name })),
      [
        { kind: 'task', name: 'nap' },
        { kind: 'queue', name: 'held' },
      ],
    );

    const naps = await add(6, () => ({ identifier: 'nap' }));
    const held = await add(6, () => ({ identifier: 'record', queueName: 'held' }));
    // A queue headed by a job of the paused task: the head holds its queue (its order is kept).
    const mixed = [...(await add(1, () => ({ identifier: 'nap', queueName: 'mixed' }))), ...(await add(4, () => ({ identifier: 'record', queueName: 'mixed' })))];
    const addedAt = Date.now();
    const other = await otherWorkFor(OBSERVED_MS);
    assert.ok(Date.now() - addedAt >= OBSERVED_MS);
    const pids = (await sql.query<{ pid: number }>('select distinct pid from runs where job_id = any($1::bigint[])', [other])).rows;
    assert.equal(pids.length, 2, 'both processes ran other work meanwhile');
    const paused = [...naps, ...held, ...mixed];
    assert.deepEqual(await ranIds(paused), [], 'no paused job ran');
    assert.equal(await untouched(paused), paused.length, 'no paused job was claimed: each waits in place, with no attempt');

    // Health: paused jobs are neither due jobs nobody runs nor a reason to be down; the pauses are listed.
    const startable = (await t.app.get(JobQueueDatabase).run<{ count: number }>('startableJobs', []))[0];
    assert.equal(startable.count, 0, 'paused jobs are not startable');
    // dueJobs counts every due job of no paused task or queue, those behind a queue's head too: here the four behind the paused head.
    assert.equal((await t.app.get(JobQueueDatabase).run<{ count: number }>('dueJobs', []))[0].count, 4, 'due jobs leave the paused ones out');
    const health = (await t.app.get(JobQueueHealthIndicator).isHealthy('jobQueue', { maxDueAge: 1_000 })).jobQueue as Record<string, unknown>;
    assert.equal(health.status, 'up', JSON.stringify(health));
    assert.deepEqual((health.paused as Array<{ kind: string; name: string }>).map(({ kind, name }) => `${kind}:${name}`), ['task:nap', 'queue:held']);

    await t.jobs.resumeQueue('held');
    await t.jobs.resumeTask('nap');
    await waitFor('every paused job to run after the resume', async () => (await ranIds(paused)).length === paused.length);
    const order = await ranIds(paused);
    assert.deepEqual(order.filter((id) => held.includes(id)), held, 'the paused queue ran in its order');
    assert.deepEqual(order.filter((id) => mixed.includes(id)), mixed, 'the queue held by a paused head ran in its order, the head first');
    assert.deepEqual([...order].sort(), [...paused].sort(), 'each paused job ran once');
    assert.deepEqual(await t.jobs.listPaused(), []);
  });

  it('a pause survives a restart of every process', async () => {
    await start();
    await allKnow('-');
    await t.jobs.pauseTask('nap');
    await t.jobs.pauseQueue('held');
    await allKnow('queue:held,task:nap');
    const naps = await add(3, () => ({ identifier: 'nap' }));
    const held = await add(3, () => ({ identifier: 'record', queueName: 'held' }));
    for (const p of processes) await p.terminate();
    await t.close();
    t = await createTestApp({ url: db.url, imports: [TerminusModule], providers: [JobQueueHealthIndicator], jobQueue: { worker: false, externalTasks: ['record', 'nap'] } });
    await start();
    await allKnow('queue:held,task:nap'); // read at start
    // A positive sign that both restarted processes claim: other work added after them runs.
    const other = await add(16, () => ({ identifier: 'record' }));
    await waitFor('other work to run after the restart', async () => (await ranIds(other)).length === other.length);
    assert.deepEqual(await ranIds([...naps, ...held]), [], 'the paused jobs wait after the restart');
    await t.jobs.resumeTask('nap');
    await t.jobs.resumeQueue('held');
    await waitFor('the paused jobs to run after the resume', async () => (await ranIds([...naps, ...held])).length === 6);
    assert.deepEqual((await ranIds(held)), held);
  });

  it("pauseTask('*') stops all work for 3 s; resumeTask('*') lets it go", async () => {
    await start();
    await allKnow('-');
    await t.jobs.pauseTask('*');
    await allKnow('task:*');
    const jobs = [...(await add(5, () => ({ identifier: 'record' }))), ...(await add(3, () => ({ identifier: 'record', queueName: 'q-all' })))];
    const since = Date.now();
    await waitFor('the observation window', () => Date.now() - since >= OBSERVED_MS, OBSERVED_MS + 60_000);
    assert.deepEqual(await ranIds(jobs), [], 'nothing ran');
    assert.equal(await untouched(jobs), jobs.length);
    const [all] = await t.jobs.listPaused();
    assert.deepEqual([all.kind, all.name], ['task', '*']);
    assert.ok(all.since instanceof Date && all.since.getTime() <= since);
    const health = (await t.app.get(JobQueueHealthIndicator).isHealthy('jobQueue', { maxDueAge: 1_000 })).jobQueue as Record<string, unknown>;
    assert.equal(health.status, 'up', JSON.stringify(health));
    assert.equal(health.dueJobs, 0);
    await t.jobs.resumeTask('*');
    await waitFor('every job to run after the resume', async () => (await ranIds(jobs)).length === jobs.length);
  });

  it('refuses bad input before anything is written', async () => {
    await assert.rejects(t.jobs.pauseTask('no_such_task'), { code: 'JQ_UNKNOWN_TASK' });
    await assert.rejects(t.jobs.pauseTask(42 as never), { code: 'JQ_INVALID_TASK_IDENTIFIER' });
    await assert.rejects(t.jobs.pauseQueue(''), { code: 'JQ_INVALID_QUEUE_NAME' });
    await assert.rejects(t.jobs.pauseQueue('q'.repeat(129)), { code: 'JQ_INVALID_QUEUE_NAME' });
    await assert.rejects(t.jobs.pauseQueue(undefined as never), { code: 'JQ_INVALID_QUEUE_NAME' });
    await assert.rejects(t.jobs.resumeQueue(null as never), { code: 'JQ_INVALID_QUEUE_NAME' });
    assert.deepEqual(await t.jobs.listPaused(), []);
    // A resume takes any valid name (a pause of a task since removed from the code can be lifted); pausing twice keeps the first time.
    await t.jobs.resumeTask('no_such_task');
    await t.jobs.pauseQueue('twice');
    const [first] = await t.jobs.listPaused();
    await t.jobs.pauseQueue('twice');
    assert.deepEqual(await t.jobs.listPaused(), [first]);
  });
});
