import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { DataSource, type EntityManager } from 'typeorm';
import { JobQueueMaintenance, Task, type JobContext, type TransactionalJobContext } from '../../libs/job-queue/src';
import { runTask } from '../../libs/job-queue/src/testing';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor, waitForValue } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses, type WorkerProcess } from '../support/worker-processes';

/** Each step's effect, in a table of the test's own (outside the queue's schema): job_id, step, pid, attempt. */
const CREATE_EFFECTS = 'create table step_effects (n serial, job_id bigint not null, step text not null, pid int not null, attempt int not null)';

type Effect = { step: string; pid: number; attempt: number };
const effectsOf = async (sql: Client, jobId: string): Promise<Effect[]> =>
  (await sql.query('select step, pid, attempt from step_effects where job_id = $1 order by n', [jobId])).rows;
/** The steps recorded for a job: name, result, and its kind (`sql null` for a step that returned undefined, else jsonb_typeof). */
const stepsOf = async (sql: Client, jobId: string): Promise<Array<{ name: string; result: unknown; kind: string }>> =>
  (await sql.query(`select name, result, coalesce(jsonb_typeof(result), 'sql null') as kind from job_queue.job_steps where job_id = $1 order by created_at, name`, [jobId])).rows;
const finishedOf = async (sql: Client, jobId: string) =>
  (await sql.query('select state, attempts, result, errors from job_queue.finished_jobs where id = $1', [jobId])).rows[0];

/**
 * `ctx.step(name, fn)` under kills, in worker processes (worker-process.ts, tasks `two-steps`
 * and `tx-step`): a step recorded before a SIGKILL is not run again by the job's next run,
 * and a transactional step's write exists once whether the kill comes before or after its commit.
 */
describe('durable steps under SIGKILL', () => {
  const ENV = { HEARTBEAT_INTERVAL: '250', WORKER_TIMEOUT: '2000' };
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('steps_kill');
    sql = await connect(db.url);
    await sql.query(CREATE_EFFECTS);
    await sql.query('create table handler_events (job_id bigint not null, pid int not null, event text not null, code text)');
    await sql.query('create table handler_go (job_id bigint not null)');
  });
  afterEach(async () => {
    await stopWorkerProcesses();
    await sql.query('truncate step_effects, handler_events, handler_go');
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  const hasEvent = async (jobId: string, pid: number, event: string) =>
    (await sql.query('select 1 from handler_events where job_id = $1 and pid = $2 and event = $3', [jobId, pid, event])).rowCount === 1;
  const start = async () => (await startWorkerProcesses(1, { url: db.url, concurrency: 2, env: ENV }))[0];
  const gone = (worker: WorkerProcess) =>
    waitForValue(sql, `the sessions of pid ${worker.pid} to end`, 'select count(*)::int from pg_stat_activity where application_name = $1', 0, [`worker-${worker.pid}`]);
  const completed = (jobId: string) => waitFor(`job ${jobId} to complete`, async () => (await finishedOf(sql, jobId))?.state === 'completed');

  it('a worker killed between two steps: the next run skips the first step, runs the second, and each effect happened once', async () => {
    const victim = await start();
    const [job] = (await sql.query(`select id::text from job_queue.add_job('two-steps')`)).rows;
    await waitFor('the victim to finish the first step', () => hasEvent(job.id, victim.pid, 'between'));
    await victim.kill();
    await gone(victim);
    assert.deepEqual(await effectsOf(sql, job.id), [{ step: 'first', pid: victim.pid, attempt: 1 }]);
    assert.deepEqual((await stepsOf(sql, job.id)).map((s) => s.name), ['first'], 'the first step was recorded before the kill');

    await sql.query('insert into handler_go values ($1)', [job.id]);
    const rescuer = await start();
    await completed(job.id);
    assert.ok(await hasEvent(job.id, rescuer.pid, 'between'), 'the rescuing worker ran the handler again');
    assert.deepEqual(await effectsOf(sql, job.id), [
      { step: 'first', pid: victim.pid, attempt: 1 },
      { step: 'second', pid: rescuer.pid, attempt: 2 },
    ]);
    const row = await finishedOf(sql, job.id);
    assert.deepEqual(
      { state: row.state, attempts: row.attempts, result: row.result },
      { state: 'completed', attempts: 2, result: { first: { pid: victim.pid, attempt: 1 }, second: { pid: rescuer.pid, attempt: 2 } } },
      "the first step's recorded result came back to the second run",
    );
    assert.deepEqual((await stepsOf(sql, job.id)).map((s) => s.name), ['first', 'second'], 'steps stay with the finished job');
  });

  it("a transactional step killed before its commit leaves neither its write nor its record; the next run writes once", async () => {
    const victim = await start();
    const [job] = (await sql.query(`select id::text from job_queue.add_job('tx-step', '{"hold":"inside"}')`)).rows;
    await waitFor('the victim to write inside its step', () => hasEvent(job.id, victim.pid, 'wrote'));
    await waitForValue(sql, "the step's transaction to hold its write, uncommitted", `select count(*)::int > 0 from pg_stat_activity where application_name = $1 and backend_xid is not null`, true, [`worker-${victim.pid}`]);
    await victim.kill();
    await gone(victim);
    assert.deepEqual(await effectsOf(sql, job.id), [], 'the write died with the transaction');
    assert.deepEqual(await stepsOf(sql, job.id), [], 'and so did the record');

    await sql.query('insert into handler_go values ($1)', [job.id]);
    const rescuer = await start();
    await completed(job.id);
    assert.deepEqual(await effectsOf(sql, job.id), [{ step: 'write', pid: rescuer.pid, attempt: 2 }]);
    assert.deepEqual((await finishedOf(sql, job.id)).result, { written: { pid: rescuer.pid, attempt: 2 } });
  });

  it('a transactional step killed after its commit is not run again: its write exists once, and its result comes back', async () => {
    const victim = await start();
    const [job] = (await sql.query(`select id::text from job_queue.add_job('tx-step', '{"hold":"after"}')`)).rows;
    await waitFor('the victim to pass its step', () => hasEvent(job.id, victim.pid, 'stepped'));
    await victim.kill();
    await gone(victim);
    assert.deepEqual(await effectsOf(sql, job.id), [{ step: 'write', pid: victim.pid, attempt: 1 }]);
    assert.deepEqual(await stepsOf(sql, job.id), [{ name: 'write', result: { pid: victim.pid, attempt: 1 }, kind: 'object' }]);

    await sql.query('insert into handler_go values ($1)', [job.id]);
    const rescuer = await start();
    await completed(job.id);
    assert.ok(await hasEvent(job.id, rescuer.pid, 'stepped'), 'the rescuing worker ran the handler');
    assert.ok(!(await hasEvent(job.id, rescuer.pid, 'wrote')), 'but not the step');
    assert.deepEqual(await effectsOf(sql, job.id), [{ step: 'write', pid: victim.pid, attempt: 1 }], 'written once, by the run that committed it');
    assert.deepEqual((await finishedOf(sql, job.id)).result, { written: { pid: victim.pid, attempt: 1 } });
  });
});

/** What the first attempt's step `a` returns; the retry must get exactly this back (a Date as JSON gives it). */
const A_RESULT = { n: 1, list: [1, 'two', { three: [3] }], at: new Date(Date.UTC(2024, 0, 2)), nothing: null };
const A_BACK = JSON.parse(JSON.stringify(A_RESULT));

@Injectable()
class StepTasks {
  constructor(private readonly dataSource: DataSource) {}

  private effect(ctx: JobContext, step: string, manager: EntityManager = this.dataSource.manager) {
    return manager.query('insert into step_effects (job_id, step, pid, attempt) values ($1, $2, $3, $4)', [ctx.job.id, step, process.pid, ctx.job.attempts]);
  }

  /** Three steps (an object, undefined, null), then a throw on the first attempt; returns what the steps gave it. */
  @Task('steps_then_throw', { maxAttempts: 3, retryDelay: () => 10 })
  async stepsThenThrow(_payload: unknown, ctx: JobContext) {
    const a = await ctx.step('a', async () => (await this.effect(ctx, 'a'), A_RESULT));
    const b = await ctx.step('b', async () => void (await this.effect(ctx, 'b')));
    const c = await ctx.step('c', async () => (await this.effect(ctx, 'c'), null));
    if (ctx.job.attempts === 1) throw new Error('failed after its steps');
    return { a, b: b === undefined ? 'undefined' : b, c };
  }

  /** The same step name twice in one attempt. */
  @Task('steps_duplicate', { maxAttempts: 1 })
  async stepsDuplicate(_payload: unknown, ctx: JobContext) {
    await ctx.step('same', () => this.effect(ctx, 'same#1'));
    await ctx.step('same', () => this.effect(ctx, 'same#2'));
  }

  /** Steps the library must refuse: a bad name, bad options, a result JSON cannot carry. */
  @Task('steps_bad', { maxAttempts: 1 })
  async stepsBad(payload: { bad: 'name' | 'options' | 'json' }, ctx: JobContext) {
    const step = ctx.step as (name: unknown, fn: unknown, options?: unknown) => Promise<unknown>;
    if (payload.bad === 'name') await step('', () => this.effect(ctx, 'unnamed'));
    if (payload.bad === 'options') await step('opts', () => this.effect(ctx, 'opts'), { transaction: 'yes' });
    if (payload.bad === 'json') await step('bigint', async () => (await this.effect(ctx, 'bigint'), { amount: 10n }));
  }

  /** A transactional task: its attempt's transaction rolls back on the first attempt, the plain step's record does not. */
  @Task('steps_in_tx_task', { transaction: true, maxAttempts: 3, retryDelay: () => 10 })
  async stepsInTxTask(_payload: unknown, ctx: TransactionalJobContext) {
    const charged = await ctx.step('charge', async () => (await this.effect(ctx, 'charge'), { charged: ctx.job.attempts }));
    await this.effect(ctx, 'attempt-write', ctx.manager);
    if (ctx.job.attempts === 1) throw new Error('the attempt rolls back');
    return charged;
  }
}

/** Steps in one process: retries, refused steps, what stays and what goes with the job's history, runTask. */
describe('durable steps', () => {
  let ctx: TestAppContext;
  let sql: Client;
  before(async () => {
    ctx = await openTestApp('steps', { providers: [StepTasks], jobQueue: { pollInterval: 50 } });
    sql = ctx.sql;
    await sql.query(CREATE_EFFECTS);
  });
  after(() => closeTestApp(ctx));

  const finished = (jobId: string) => waitFor(`job ${jobId} to finish`, async () => (await finishedOf(sql, jobId)) !== undefined);

  it('a retry after a thrown error skips the recorded steps and gets their results back, undefined and null kept apart', async () => {
    const job = await ctx.t.jobs.add('steps_then_throw');
    await finished(job.id);
    assert.deepEqual(await effectsOf(sql, job.id), ['a', 'b', 'c'].map((step) => ({ step, pid: process.pid, attempt: 1 })), 'each step ran once, in the first attempt');
    const row = await finishedOf(sql, job.id);
    assert.deepEqual({ state: row.state, attempts: row.attempts }, { state: 'completed', attempts: 2 });
    assert.deepEqual(row.result, { a: A_BACK, b: 'undefined', c: null }, 'the second attempt got back what the first one recorded');
    assert.deepEqual(await stepsOf(sql, job.id), [
      { name: 'a', result: A_BACK, kind: 'object' },
      { name: 'b', result: null, kind: 'sql null' },
      { name: 'c', result: null, kind: 'null' },
    ]);
  });

  it('the same step name twice in one attempt throws JQ_DUPLICATE_STEP, and the second step never runs', async () => {
    const job = await ctx.t.jobs.add('steps_duplicate');
    await finished(job.id);
    const row = await finishedOf(sql, job.id);
    assert.deepEqual({ state: row.state, codes: row.errors.map((e: { code: string }) => e.code) }, { state: 'failed', codes: ['JQ_DUPLICATE_STEP'] });
    assert.deepEqual((await effectsOf(sql, job.id)).map((e) => e.step), ['same#1']);
    assert.deepEqual((await stepsOf(sql, job.id)).map((s) => s.name), ['same']);
  });

  it('a bad name or bad options are refused before the step runs; a result JSON cannot carry is not recorded', async () => {
    const jobs = await ctx.t.jobs.addMany([
      { identifier: 'steps_bad', payload: { bad: 'name' } },
      { identifier: 'steps_bad', payload: { bad: 'options' } },
      { identifier: 'steps_bad', payload: { bad: 'json' } },
    ]);
    for (const job of jobs) await finished(job.id);
    const codes: string[][] = [];
    const effects: string[][] = [];
    for (const job of jobs) {
      codes.push((await finishedOf(sql, job.id)).errors.map((e: { code: string }) => e.code));
      effects.push((await effectsOf(sql, job.id)).map((e) => e.step));
    }
    assert.deepEqual(codes, [['JQ_INVALID_STEP'], ['JQ_INVALID_STEP'], ['JQ_RESULT_NOT_JSON']]);
    assert.deepEqual(effects, [[], [], ['bigint']], 'refused steps never ran; the one whose result was refused did');
    for (const job of jobs) assert.deepEqual(await stepsOf(sql, job.id), [], `job ${job.id} recorded nothing`);
  });

  it("a transactional task's plain step stays recorded when the attempt's transaction rolls back", async () => {
    const job = await ctx.t.jobs.add('steps_in_tx_task');
    await finished(job.id);
    assert.deepEqual((await effectsOf(sql, job.id)).map((e) => `${e.step}@${e.attempt}`), ['charge@1', 'attempt-write@2'], "the first attempt's write rolled back, its step stayed");
    assert.deepEqual((await finishedOf(sql, job.id)).result, { charged: 1 });
  });

  it("deleteJob deletes the job's steps with it", async () => {
    const job = await ctx.t.jobs.add('steps_then_throw');
    await finished(job.id);
    assert.equal((await stepsOf(sql, job.id)).length, 3);
    await ctx.t.jobs.deleteJob(job.id);
    assert.deepEqual(await stepsOf(sql, job.id), []);
  });

  it('runTask runs steps with their results in memory, and skips the steps it is given', async () => {
    await assert.rejects(runTask(ctx.t.app, 'steps_then_throw', {}), /failed after its steps/);
    const run = await runTask(ctx.t.app, 'steps_then_throw', {}, { attempt: 2 });
    assert.deepEqual(run.result, { a: A_BACK, b: 'undefined', c: null });
    assert.deepEqual(run.steps, { a: A_BACK, b: undefined, c: null });
    const given = await runTask(ctx.t.app, 'steps_then_throw', {}, { attempt: 2, steps: { a: 'given', b: 2, c: 3 } });
    assert.deepEqual(given.result, { a: 'given', b: 2, c: 3 });
    assert.deepEqual((await effectsOf(sql, '0')).map((e) => e.step), ['a', 'b', 'c', 'a', 'b', 'c'], 'the given steps did not run');
    await assert.rejects(runTask(ctx.t.app, 'steps_duplicate', {}), { code: 'JQ_DUPLICATE_STEP' });
  });
});

/**
 * Steps go with the job's history: a completion that is not kept (retention.completed 0)
 * takes them along, in the release and in a transactional completion alike; the cleaner
 * deletes them with the expired history it deletes.
 */
describe('durable steps and retention', () => {
  let ctx: TestAppContext;
  let sql: Client;
  before(async () => {
    ctx = await openTestApp('steps_retention', { providers: [StepTasks], jobQueue: { worker: false, retention: { completed: 0, failed: 0 } } });
    sql = ctx.sql;
    await sql.query(CREATE_EFFECTS);
  });
  after(() => closeTestApp(ctx));

  it('a completion that is not kept deletes its steps; the cleaner deletes those of expired history', async () => {
    const [released, committed, failed] = await ctx.t.jobs.addMany([
      { identifier: 'steps_then_throw' },
      { identifier: 'steps_in_tx_task' },
      { identifier: 'steps_duplicate' },
    ]);
    await waitFor('the jobs to finish', async () => {
      await ctx.t.worker.runUntilIdle();
      return (await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n === 0;
    });
    assert.deepEqual((await effectsOf(sql, released.id)).length, 3, 'its steps ran');
    assert.deepEqual(await stepsOf(sql, released.id), [], 'completed, not kept: no steps left (the release)');
    assert.deepEqual(await stepsOf(sql, committed.id), [], 'completed in its transaction, not kept: no steps left');
    assert.equal((await finishedOf(sql, failed.id))?.state, 'failed');
    assert.deepEqual((await stepsOf(sql, failed.id)).map((s) => s.name), ['same'], 'a kept failure keeps its steps');

    await ctx.t.app.get(JobQueueMaintenance).runOnce();
    assert.equal(await finishedOf(sql, failed.id), undefined, 'its history expired');
    assert.deepEqual(await stepsOf(sql, failed.id), [], 'and its steps went with it');
  });
});
