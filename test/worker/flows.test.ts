import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { FlowEndedError, PermanentJobError, Task, type JobContext, type TransactionalJobContext } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { waitFor } from '../support/wait';

/** What each handler saw, by the ref of its job: the test asserts on this after the fact, never inside a handler. */
const seen = new Map<string, { attempts: number; dependencies: unknown; startedAfter: string[] }>();
/** Refs whose handler ran, in start order (a job's ref, once per attempt). */
const runs: string[] = [];
/** Refs whose handler must fail for good. */
const failing = new Set<string>();
/** Refs whose handler waits at a gate until the test opens it. */
const held = new Set<string>();
/** The gates of the held handlers that reached them, by ref. */
const gates = new Map<string, () => void>();

@Injectable()
class FlowTasks {
  @Task('step', { retryDelay: () => 0 })
  async step(payload: { ref: string; left?: number }, ctx: JobContext) {
    const ref = ctx.job.flowRef ?? payload.ref;
    runs.push(ref);
    seen.set(ref, { attempts: ctx.job.attempts, dependencies: await ctx.dependencyResults(), startedAfter: [...runs] });
    if (held.has(ref)) await new Promise<void>((resolve, reject) => {
      gates.set(ref, resolve);
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason));
    });
    if (failing.has(ref)) throw new PermanentJobError(`${ref} failed`);
    if (payload.left !== undefined && payload.left > 0) ctx.continueWith('step', { ref, left: payload.left - 1 });
    return { ref, left: payload.left ?? null };
  }

  /** transaction: true: writes a row through ctx.manager and continues once; both commit with the completion. */
  @Task('tx_chain', { transaction: true })
  async txChain(payload: { n: number }, ctx: TransactionalJobContext) {
    await ctx.manager.query('insert into chain_writes (job_id, n) values ($1, $2)', [ctx.job.id, payload.n]);
    if (payload.n > 0) ctx.continueWith('tx_chain', { n: payload.n - 1 });
    return { n: payload.n };
  }

  /** Continues its chain, then throws: the continuation must not exist. */
  @Task('continue_then_fail', { maxAttempts: 1 })
  async continueThenFail(_payload: unknown, ctx: JobContext) {
    ctx.continueWith('step', { ref: 'never' });
    throw new Error('failed after continueWith');
  }
}

describe('flows: jobs that wait for jobs', () => {
  let c: TestAppContext;

  before(async () => {
    c = await openTestApp('flows', { providers: [FlowTasks], jobQueue: { pollInterval: 100, concurrency: 4 } });
  });
  after(() => closeTestApp(c));
  beforeEach(() => {
    seen.clear();
    runs.length = 0;
    failing.clear();
    held.clear();
    gates.clear();
  });

  const step = (ref: string, dependsOn: string[] = [], extra: object = {}) => ({ ref, identifier: 'step', payload: { ref }, dependsOn, ...extra });
  /** Each job of `flow` by its ref: its state as getJob reads it now. */
  const statesOf = async (flow: { jobs: Record<string, { id: string }> }) =>
    Object.fromEntries(await Promise.all(Object.entries(flow.jobs).map(async ([ref, job]) => [ref, (await c.t.jobs.getJob(job.id))?.state])));

  it('a diamond: the join starts only after both branches, sees their results, and every job runs once', async () => {
    const flow = await c.t.jobs.addFlow([step('join', ['left', 'right']), step('left', ['root']), step('right', ['root']), step('root')]);
    assert.equal(flow.jobs.root.state, 'waiting');
    assert.equal(flow.jobs.join.state, 'blocked');
    assert.equal(flow.flowId, flow.jobs.join.flowId);
    const results = await c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 });
    assert.deepEqual(results, { root: { ref: 'root', left: null }, left: { ref: 'left', left: null }, right: { ref: 'right', left: null }, join: { ref: 'join', left: null } });
    assert.deepEqual([...runs].sort(), ['join', 'left', 'right', 'root']);
    assert.equal(runs[0], 'root');
    assert.equal(runs[3], 'join', 'the join ran last');
    assert.deepEqual(seen.get('join')!.dependencies, {
      left: { state: 'completed', result: { ref: 'left', left: null } },
      right: { state: 'completed', result: { ref: 'right', left: null } },
    });
    const read = await c.t.jobs.getFlow(flow.flowId);
    assert.equal(read?.state, 'completed');
    assert.equal(read?.jobs.length, 4);
    assert.equal(read?.edges.length, 4);
  });

  it("policy 'fail': the dependent fails with JQ_DEPENDENCY_FAILED, down the graph, and waitForFlow names the failed refs", async () => {
    failing.add('a');
    const flow = await c.t.jobs.addFlow([step('a'), step('b', ['a']), step('c', ['b'])]);
    const error = await c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 }).then(() => null, (e: unknown) => e);
    assert.ok(error instanceof FlowEndedError, String(error));
    assert.equal(error.code, 'JQ_FLOW_FAILED');
    assert.match(error.message, /a/);
    const b = await c.t.jobs.getJob(flow.jobs.b.id);
    const cJob = await c.t.jobs.getJob(flow.jobs.c.id);
    assert.equal(b?.state, 'failed');
    assert.match(b?.lastError ?? '', /^JQ_DEPENDENCY_FAILED: a failed/);
    assert.equal(cJob?.state, 'failed');
    assert.match(cJob?.lastError ?? '', /^JQ_DEPENDENCY_FAILED: b failed/);
    assert.deepEqual(runs, ['a'], 'b and c never ran');
  });

  it("policy 'ignore': the dependent runs as if the dependency had completed, and does not see it", async () => {
    failing.add('a');
    const flow = await c.t.jobs.addFlow([step('a'), step('ok'), step('b', ['a', 'ok'], { onDependencyFailure: 'ignore' })]);
    const results = await c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 });
    assert.deepEqual(results.b, { ref: 'b', left: null });
    assert.deepEqual(seen.get('b')!.dependencies, { ok: { state: 'completed', result: { ref: 'ok', left: null } } });
    assert.equal((await c.t.jobs.getFlow(flow.flowId))?.state, 'completed', 'a failure taken in its stride does not fail the flow');
  });

  it("policy 'continue': the dependent runs once all dependencies ended, and sees the failure", async () => {
    failing.add('a');
    const flow = await c.t.jobs.addFlow([step('a'), step('b', ['a'], { onDependencyFailure: 'continue' })]);
    await c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 });
    assert.deepEqual(seen.get('b')!.dependencies, { a: { state: 'failed', error: 'JQ_JOB_FAILED_FOR_GOOD: a failed' } });
  });

  it("a dependent of a failed job and of its 'fail' dependent runs once, after both ended, and sees both failures", async () => {
    // a's failure settles c's edge to a and fails b in the same statement; b's failure then settles c's edge to b: c moves once, with its count at zero
    failing.add('a');
    const flow = await c.t.jobs.addFlow([step('a'), step('b', ['a']), step('d', ['b']), step('c', ['a', 'b'], { onDependencyFailure: 'continue' })]);
    await assert.rejects(c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 }), (e: unknown) => e instanceof FlowEndedError && e.code === 'JQ_FLOW_FAILED');
    assert.deepEqual([...runs].sort(), ['a', 'c'], 'b and d failed unrun, c ran once');
    assert.deepEqual(seen.get('c')!.dependencies, {
      a: { state: 'failed', error: 'JQ_JOB_FAILED_FOR_GOOD: a failed' },
      b: { state: 'failed', error: 'JQ_DEPENDENCY_FAILED: a failed' },
    });
    assert.equal((await c.t.jobs.getJob(flow.jobs.d.id))?.lastError, 'JQ_DEPENDENCY_FAILED: b failed');
  });

  it('addFlow in a rolled-back transaction leaves nothing', async () => {
    const before = await c.sql.query(`select (select count(*) from job_queue.jobs) + (select count(*) from job_queue.blocked_jobs) + (select count(*) from job_queue.flows) + (select count(*) from job_queue.job_dependencies) as n`);
    await assert.rejects(
      c.t.dataSource.transaction(async (manager) => {
        await c.t.jobs.addFlow([step('x'), step('y', ['x'])], { manager });
        throw new Error('rolled back');
      }),
      /rolled back/,
    );
    const afterRows = await c.sql.query(`select (select count(*) from job_queue.jobs) + (select count(*) from job_queue.blocked_jobs) + (select count(*) from job_queue.flows) + (select count(*) from job_queue.job_dependencies) as n`);
    assert.equal(afterRows.rows[0].n, before.rows[0].n);
  });

  it('bad flows are refused with JQ_INVALID_FLOW before anything is written, a cycle named', async () => {
    const count = async () => Number((await c.sql.query('select count(*) as n from job_queue.flows')).rows[0].n);
    const flows = await count();
    const cases: Array<[unknown, RegExp]> = [
      [[], /at least one step/],
      [[step('a'), step('a')], /'a' is used by two steps/],
      [[step('a', ['nope'])], /depends on 'nope', which is no step/],
      [[step('a', ['c']), step('b', ['a']), step('c', ['b'])], /cycle: a → c → b → a/],
      [Array.from({ length: 10_001 }, (_, i) => step(`s${i}`)), /at most 10000 steps/],
      [[{ ...step('a'), jobKey: 'k' }], /take no jobKey/],
      [[step('a', [], { onDependencyFailure: 'maybe' })], /onDependencyFailure/],
    ];
    for (const [steps, message] of cases) {
      await assert.rejects(c.t.jobs.addFlow(steps as never), (error: { code?: string; message: string }) => {
        assert.equal(error.code, 'JQ_INVALID_FLOW', error.message);
        assert.match(error.message, message);
        return true;
      });
    }
    await assert.rejects(c.t.jobs.addFlow([{ ref: 'a', identifier: 'nobody_runs_this' }] as never), { code: 'JQ_UNKNOWN_TASK' });
    assert.equal(await count(), flows, 'no flow was written');
  });

  it('a chain: continueWith adds the next job, dependents wait for the end of the chain and get its result', async () => {
    const flow = await c.t.jobs.addFlow([{ ref: 'chain', identifier: 'step', payload: { ref: 'chain', left: 2 } }, step('after', ['chain'])]);
    const results = await c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 });
    assert.deepEqual(results.chain, { ref: 'chain', left: 0 }, "the chain's result is its last job's");
    assert.deepEqual(seen.get('after')!.dependencies, { chain: { state: 'completed', result: { ref: 'chain', left: 0 } } });
    assert.deepEqual(runs, ['chain', 'chain', 'chain', 'after']);
    const read = await c.t.jobs.getFlow(flow.flowId);
    assert.equal(read?.jobs.length, 4);
    assert.ok(read?.jobs.every((job) => job.flowId === flow.flowId));
  });

  it("a step's id is no flow's id: getFlow and cancelFlow of it find no flow, and touch nothing", async () => {
    const flow = await c.t.jobs.addFlow([{ ref: 'x', identifier: 'step', payload: { ref: 'x' }, runAt: new Date(Date.now() + 3_600_000) }, step('y', ['x'])]);
    const second = [flow.jobs.x.id, flow.jobs.y.id].find((id) => id !== flow.flowId)!;
    assert.equal(await c.t.jobs.getFlow(second), null);
    await assert.rejects(c.t.jobs.cancelFlow(second), { code: 'JQ_FLOW_NOT_FOUND' });
    assert.deepEqual((await c.t.jobs.getFlow(flow.flowId))?.jobs.map((job) => job.state).sort(), ['blocked', 'scheduled']);
    await c.t.jobs.cancelFlow(flow.flowId);
  });

  it('a job added alone is a flow of its own; its chain is waited for by waitForFlow', async () => {
    const job = await c.t.jobs.add('step', { ref: 'alone', left: 1 });
    assert.equal(job.flowId, job.id);
    const results = await c.t.jobs.waitForFlow(job.id, { timeout: 30_000 });
    assert.deepEqual(results, { [job.id]: { ref: 'alone', left: 0 } });
    assert.equal(runs.length, 2);
  });

  it('a transactional task continues its chain in its own transaction: its writes, the continuation and the completion commit together', async () => {
    await c.sql.query('create table if not exists chain_writes (job_id bigint primary key, n int not null)');
    const job = await c.t.jobs.add('tx_chain', { n: 2 });
    const results = await c.t.jobs.waitForFlow(job.id, { timeout: 30_000 });
    assert.deepEqual(results, { [job.id]: { n: 0 } });
    const { rows } = await c.sql.query('select w.n, f.flow_id::text from chain_writes w join job_queue.finished_jobs f on f.id = w.job_id order by w.n desc');
    assert.deepEqual(rows, [2, 1, 0].map((n) => ({ n, flow_id: job.id })));
  });

  it('continueWith in an attempt that fails leaves no continuation', async () => {
    const job = await c.t.jobs.add('continue_then_fail', {});
    await assert.rejects(c.t.jobs.waitForJob(job.id, { timeout: 30_000 }), { code: 'JQ_JOB_FAILED' });
    const rows = await c.sql.query(`select count(*)::int as n from job_queue.jobs where flow_id = $1 or task_identifier = 'step'`, [job.id]);
    assert.equal(rows.rows[0].n, 0);
    assert.equal(runs.length, 0, 'no step ran');
  });

  it('cancelFlow cancels blocked, waiting and running jobs (the running handler aborted)', async () => {
    held.add('slow');
    const flow = await c.t.jobs.addFlow([step('slow'), step('next', ['slow']), step('last', ['next'])]);
    await waitFor('slow at its gate', () => gates.has('slow'));
    const cancelled = await c.t.jobs.cancelFlow(flow.flowId, 'stop');
    assert.equal(cancelled.jobs.find((j) => j.flowRef === 'next')?.state, 'cancelled');
    await assert.rejects(c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 }), { code: 'JQ_FLOW_CANCELLED' });
    const states = (await c.t.jobs.getFlow(flow.flowId))!.jobs.map((job) => [job.flowRef, job.state]);
    assert.deepEqual(states, [['slow', 'cancelled'], ['next', 'cancelled'], ['last', 'cancelled']]);
    assert.deepEqual(runs, ['slow']);
  });

  it("cancelJob of a blocked job cancels it, and its 'fail' dependents fail with JQ_DEPENDENCY_FAILED", async () => {
    const flow = await c.t.jobs.addFlow([{ ref: 'later', identifier: 'step', payload: { ref: 'later' }, runAt: new Date(Date.now() + 3_600_000) }, step('mid', ['later']), step('end', ['mid'])]);
    const cancelled = await c.t.jobs.cancelJob(flow.jobs.mid.id, 'not needed');
    assert.equal(cancelled.state, 'cancelled');
    const end = await c.t.jobs.getJob(flow.jobs.end.id);
    assert.equal(end?.state, 'failed');
    assert.equal(end?.lastError, 'JQ_DEPENDENCY_FAILED: mid was cancelled');
    assert.equal((await c.t.jobs.getJob(flow.jobs.later.id))?.state, 'scheduled', 'the dependency itself is untouched');
    await c.t.jobs.cancelFlow(flow.flowId);
    assert.equal((await c.t.jobs.getFlow(flow.flowId))?.state, 'failed', 'a dependency failure decides the state over the later cancel');
  });

  it('retryJobs on a failed job puts its dependency-failed dependents back to blocked, and the flow runs to the end', async () => {
    failing.add('a');
    const flow = await c.t.jobs.addFlow([step('a'), step('b', ['a']), step('c', ['b'])]);
    await assert.rejects(c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 }), { code: 'JQ_FLOW_FAILED' });
    failing.clear();
    const [retried] = await c.t.jobs.retryJobs([flow.jobs.a.id]);
    assert.equal(retried.id, flow.jobs.a.id);
    const results = await c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 });
    assert.deepEqual(Object.keys(results).sort(), ['a', 'b', 'c']);
    assert.deepEqual(runs, ['a', 'a', 'b', 'c']);
  });

  it('retryJobs leaves a `fail` dependent failed while another of its dependencies stays failed; retrying that one too runs it once', async () => {
    failing.add('a');
    failing.add('b');
    const flow = await c.t.jobs.addFlow([step('a'), step('b'), step('join', ['a', 'b']), step('after', ['join']), step('aside', ['a'])]);
    await assert.rejects(c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 }), { code: 'JQ_FLOW_FAILED' });
    failing.clear();
    await c.t.jobs.retryJobs([flow.jobs.a.id]);
    // a completes and `aside` (a's alone) runs; `join` and `after` stay failed, b being failed still
    await assert.rejects(c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 }), { code: 'JQ_FLOW_FAILED' });
    assert.deepEqual(await statesOf(flow), { a: 'completed', b: 'failed', join: 'failed', after: 'failed', aside: 'completed' });
    assert.deepEqual([...runs].sort(), ['a', 'a', 'aside', 'b']);
    await c.t.jobs.retryJobs([flow.jobs.b.id]);
    const results = await c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 });
    assert.deepEqual(Object.keys(results).sort(), ['a', 'after', 'aside', 'b', 'join']);
    assert.deepEqual([...runs].sort(), ['a', 'a', 'after', 'aside', 'b', 'b', 'join']);
    assert.deepEqual(seen.get('join')!.dependencies, {
      a: { state: 'completed', result: { ref: 'a', left: null } },
      b: { state: 'completed', result: { ref: 'b', left: null } },
    });
  });

  it('retryJobs of a failed dependency with a job down the graph brings back what waits only on that job', async () => {
    failing.add('a');
    failing.add('b');
    const flow = await c.t.jobs.addFlow([step('a'), step('b'), step('x', ['a', 'b']), step('y', ['x']), step('w', ['y'])]);
    await assert.rejects(c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 }), { code: 'JQ_FLOW_FAILED' });
    failing.clear();
    // y, retried itself, runs (as any retried job does); w waits only on y, so it comes back too; x stays failed with b
    await c.t.jobs.retryJobs([flow.jobs.a.id, flow.jobs.y.id]);
    await assert.rejects(c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 }), { code: 'JQ_FLOW_FAILED' });
    assert.deepEqual(await statesOf(flow), { a: 'completed', b: 'failed', x: 'failed', y: 'completed', w: 'completed' });
    assert.deepEqual([...runs].sort(), ['a', 'a', 'b', 'w', 'y']);
  });

  it('completeJobs completes a job from outside with a result: its dependents unblock and see it; a held job is refused', async () => {
    const flow = await c.t.jobs.addFlow([{ ref: 'approval', identifier: 'step', payload: { ref: 'approval' }, runAt: new Date(Date.now() + 3_600_000) }, step('ship', ['approval'])]);
    const [approved] = await c.t.dataSource.transaction((manager) => c.t.jobs.completeJobs([flow.jobs.approval.id], { result: { approvedBy: 'ann' }, manager }));
    assert.equal(approved.state, 'completed');
    await c.t.jobs.waitForFlow(flow.flowId, { timeout: 30_000 });
    assert.deepEqual(seen.get('ship')!.dependencies, { approval: { state: 'completed', result: { approvedBy: 'ann' } } });
    held.add('busy');
    const busy = await c.t.jobs.add('step', { ref: 'busy' });
    await waitFor('busy at its gate', () => gates.has('busy'));
    await assert.rejects(c.t.jobs.completeJobs([busy.id], { result: 1 }), { code: 'JQ_JOB_RUNNING' });
    assert.equal((await c.t.jobs.getJob(busy.id))?.state, 'running');
    gates.get('busy')!();
    await c.t.jobs.waitForJob(busy.id, { timeout: 30_000 });
  });
});
