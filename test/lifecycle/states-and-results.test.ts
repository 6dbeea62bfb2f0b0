import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext, type JobQueueEvent, type JobState } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { waitFor, waitForValue } from '../support/wait';
import { BAD_PROGRESS, coded, MAX_JSON_BYTES, NEAR_LIMIT_PROGRESS, ODD_PROGRESS, progressOutcomes, RESULTS } from './lifecycle-values';

const STATES: JobState[] = ['blocked', 'waiting', 'scheduled', 'running', 'retrying', 'completed', 'failed', 'cancelled'];
const HOUR_MS = 3_600_000;

/** Per job id, what lets a gated handler go on; set while the handler waits at its gate. */
const gates = new Map<string, () => void>();
const gate = (id: string) => new Promise<void>((resolve) => gates.set(id, resolve));

@Injectable()
class LifecycleTasks {
  /** Waits at its gate; then its first attempt throws (payload.failFirst) or it returns which attempt it was. */
  @Task('gated', { retryDelay: () => HOUR_MS })
  async gated(payload: { failFirst?: boolean }, ctx: JobContext) {
    await gate(ctx.job.id);
    if (payload.failFirst && ctx.job.attempts === 1) throw coded('flaky once', 'E_FLAKY');
    return { attempt: ctx.job.attempts };
  }

  /** Always throws, with a code that is not a string. */
  @Task('fails')
  async fails() {
    throw coded('broken for good', 42);
  }

  @Task('quick')
  async quick() {}

  @Task('returns', { retryDelay: () => HOUR_MS })
  async returns(payload: { kind: string }) {
    return RESULTS[payload.kind]();
  }

  /** Two values, then waits at its gate (its second value is stored while it waits). */
  @Task('progress-steps')
  async progressSteps(_payload: unknown, ctx: JobContext) {
    ctx.progress(40);
    ctx.progress({ step: 'b' });
    await gate(ctx.job.id);
  }

  /** 100 values in a burst; then waits at its gate (payload.wait) or returns at once. */
  @Task('progress-burst')
  async progressBurst(payload: { wait: boolean }, ctx: JobContext) {
    for (let i = 1; i <= 100; i++) ctx.progress(i);
    if (payload.wait) await gate(ctx.job.id);
  }

  /** Good values, then every bad one (each caught and recorded); then succeeds. */
  @Task('progress-bad')
  async progressBad(payload: { odd?: boolean }, ctx: JobContext) {
    ctx.progress(0);
    ctx.progress(100);
    ctx.progress(NEAR_LIMIT_PROGRESS);
    for (const [name, value] of [...BAD_PROGRESS, ...(payload.odd ? ODD_PROGRESS : [])]) {
      try {
        ctx.progress(value as never);
        progressOutcomes.set(name, 'accepted');
      } catch (error) {
        progressOutcomes.set(name, String((error as { code?: unknown }).code ?? error));
      }
    }
  }
}

/**
 * The states a job goes through, the results kept with it and the progress it reports, as
 * getJob, listJobs, countJobs and the rows show them. The app is a producer (worker: false)
 * with concurrency 1 whose worker runs only in runUntilIdle(), so that a due job stays
 * waiting until the test runs it.
 */
describe('job states, results and progress', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  const events: JobQueueEvent[] = [];

  before(async () => {
    ({ db, sql, t } = await openTestApp('lifecycle_states', {
      providers: [LifecycleTasks],
      jobQueue: { worker: false, concurrency: 1, maxJsonBytes: MAX_JSON_BYTES },
    }));
    t.worker.events$.subscribe((event) => events.push(event));
    // Every write of jobs.progress, as it lands (the last value rides on the release, which writes finished_jobs instead)
    await sql.query('create table progress_writes (seq serial, job_id bigint not null, value jsonb, at timestamptz not null)');
    await sql.query(`
      create function log_progress() returns trigger language plpgsql as $$
      begin
        insert into progress_writes (job_id, value, at) values (new.id, new.progress, clock_timestamp());
        return null;
      end $$`);
    await sql.query(`create trigger log_progress after update on job_queue.jobs for each row
      when (old.progress is distinct from new.progress) execute function log_progress()`);
  });
  beforeEach(async () => {
    events.length = 0;
    await sql.query('delete from job_queue.jobs; delete from job_queue.finished_jobs; delete from progress_writes');
  });
  afterEach(async () => {
    // a failed test must not leave a handler waiting at its gate, holding the only slot
    let settled = !background;
    background?.finally(() => (settled = true)).catch(() => undefined);
    await waitFor('the background run to end', () => {
      for (const go of gates.values()) go();
      gates.clear();
      return settled;
    });
    background = undefined;
  });
  after(() => closeTestApp({ db, sql, t }));

  /** A runUntilIdle() the test does not await at once (its handlers wait at their gates). */
  let background: Promise<void> | undefined;
  const runInBackground = () => (background = t.worker.runUntilIdle());

  /**
   * `expected` holds every job in the database and its state: getJob says it, listJobs of
   * each state lists exactly those, and countJobs counts exactly those.
   */
  async function expectStates(expected: Record<string, JobState>) {
    for (const [id, state] of Object.entries(expected)) assert.equal((await t.jobs.getJob(id))?.state, state, `getJob(${id}).state`);
    const { byState } = await t.jobs.countJobs();
    for (const state of STATES) {
      const want = Object.keys(expected).filter((id) => expected[id] === state).sort();
      const listed = (await t.jobs.listJobs({ state, limit: 1000 })).jobs.map((job) => job.id).sort();
      assert.deepEqual(listed, want, `listJobs({ state: '${state}' })`);
      assert.equal(byState[state], want.length, `countJobs().byState.${state}`);
    }
  }

  /** Lets the gated handler of job `id` go on, once it waits at its gate. */
  async function open(id: string) {
    await waitFor(`job ${id}'s handler to reach its gate`, () => gates.has(id));
    gates.get(id)!();
    gates.delete(id);
  }

  const inJobs = async (id: string) => (await sql.query('select count(*)::int as n from job_queue.jobs where id = $1', [id])).rows[0].n;
  const finishedRow = async (id: string) => (await sql.query('select * from job_queue.finished_jobs where id = $1', [id])).rows[0];

  it('scheduled → waiting → running → retrying → completed, with its result, times, worker and errors', async () => {
    const job = await t.jobs.add('gated', { failFirst: true }, { runAt: new Date(Date.now() + 2_000) });
    await expectStates({ [job.id]: 'scheduled' });

    // due: waiting, with nothing written (the state follows the clock)
    await waitFor('the job to become due', async () => (await t.jobs.getJob(job.id))?.state === 'waiting');
    await expectStates({ [job.id]: 'waiting' });

    let run = runInBackground();
    await waitFor('the handler to start', () => gates.has(job.id));
    await expectStates({ [job.id]: 'running' });
    const running = (await t.jobs.getJob(job.id))!;
    assert.equal(running.attempts, 1);
    assert.ok(running.startedAt, 'startedAt is set while it runs');
    assert.equal(running.workerId, t.worker.workerId);
    assert.equal(running.finishedAt, null);

    // the first attempt throws an error with a string code: retrying (due in an hour)
    await open(job.id);
    await run;
    await expectStates({ [job.id]: 'retrying' });
    const retrying = (await t.jobs.getJob(job.id))!;
    assert.equal(retrying.attempts, 1);
    assert.equal(retrying.lastError, 'flaky once');
    assert.equal(retrying.errors.length, 1);
    assert.deepEqual({ ...retrying.errors[0], at: undefined }, { at: undefined, attempt: 1, message: 'flaky once', code: 'E_FLAKY' });
    assert.ok(retrying.errors[0].at instanceof Date);
    assert.ok(retrying.runAt.getTime() > Date.now() + HOUR_MS / 2, 'its retry is due in an hour');

    // the retry, brought forward, succeeds
    await t.jobs.rescheduleJobs([job.id], { runAt: new Date() });
    run = runInBackground();
    await open(job.id);
    await run;
    await expectStates({ [job.id]: 'completed' });
    const done = (await t.jobs.getJob(job.id))!;
    assert.deepEqual(done.result, { attempt: 2 });
    assert.equal(done.attempts, 2);
    assert.ok(done.startedAt && done.finishedAt && done.finishedAt >= done.startedAt, 'startedAt and finishedAt set, in order');
    assert.equal(done.workerId, t.worker.workerId);
    assert.deepEqual(done.errors.map((e) => [e.attempt, e.code]), [[1, 'E_FLAKY']], 'the failed attempt stays on record');
    assert.equal(await inJobs(job.id), 0, 'it left jobs');
    assert.equal((await finishedRow(job.id)).state, 'completed');
  });

  it('a claimed job whose handler has not started (prefetched) is waiting', async () => {
    // With concurrency 1 a worker prefetches only once jobs prove fast: 60 quick ones first.
    await t.jobs.addMany(Array.from({ length: 60 }, () => ({ identifier: 'quick' })));
    await t.worker.runUntilIdle();
    await sql.query('delete from job_queue.finished_jobs');

    const [first, second] = await t.jobs.addMany([{ identifier: 'gated' }, { identifier: 'gated' }]);
    const run = runInBackground();
    await waitFor('the first handler to start', () => gates.has(first.id));
    const prefetched = (await t.jobs.getJob(second.id))!;
    assert.equal(prefetched.lockedBy, t.worker.workerId, 'the second job is claimed by the worker');
    assert.equal(prefetched.startedAt, null, 'but not started');
    await expectStates({ [first.id]: 'running', [second.id]: 'waiting' });

    await open(first.id);
    await waitFor('the second handler to start', () => gates.has(second.id));
    await waitFor('the second job to read as running', async () => (await t.jobs.getJob(second.id))?.state === 'running');
    await open(second.id);
    await run;
    await expectStates({ [first.id]: 'completed', [second.id]: 'completed' });
  });

  it('failed for good on its last attempt, and cancelled while waiting: both finished, with their errors', async () => {
    const failing = await t.jobs.add('fails', {}, { maxAttempts: 1 });
    const cancelled = await t.jobs.add('gated', {});
    await t.jobs.cancelJob(cancelled.id, 'not needed');
    await t.worker.runUntilIdle();
    await expectStates({ [failing.id]: 'failed', [cancelled.id]: 'cancelled' });

    const failed = (await t.jobs.getJob(failing.id))!;
    assert.equal(failed.attempts, 1);
    assert.equal(failed.lastError, 'broken for good');
    assert.deepEqual(failed.errors.map((e) => [e.attempt, e.message, e.code]), [[1, 'broken for good', null]], 'a numeric code is not kept');
    assert.ok(failed.finishedAt);
    assert.equal(failed.workerId, t.worker.workerId);
    assert.equal(failed.result, null);

    const gone = (await t.jobs.getJob(cancelled.id))!;
    assert.equal(gone.lastError, 'JQ_JOB_CANCELLED: not needed');
    assert.equal(gone.startedAt, null, 'it never ran');
    assert.equal(gates.has(cancelled.id), false);
    assert.deepEqual([await inJobs(failing.id), await inJobs(cancelled.id)], [0, 0]);
    assert.deepEqual([(await finishedRow(failing.id)).state, (await finishedRow(cancelled.id)).state], ['failed', 'cancelled']);
  });

  it('results: JSON values are kept as returned, undefined as null; job:success carries the result', async () => {
    const kinds = ['object', 'undefined', 'zero', 'false', 'emptyString', 'nearLimit', 'emoji'];
    const jobs = await t.jobs.addMany(kinds.map((kind) => ({ identifier: 'returns', payload: { kind } })));
    await t.worker.runUntilIdle();
    for (const [i, kind] of kinds.entries()) {
      const job = (await t.jobs.getJob(jobs[i].id))!;
      const expected = RESULTS[kind]() ?? null;
      assert.equal(job.state, 'completed', kind);
      assert.deepEqual(job.result, expected, `${kind}: the result read back`);
      const row = await finishedRow(jobs[i].id);
      assert.deepEqual(row.result, kind === 'undefined' ? null : expected, `${kind}: finished_jobs.result`);
      const success = events.find((e) => e.type === 'job:success' && e.job.id === jobs[i].id);
      assert.ok(success?.type === 'job:success', `${kind}: job:success`);
      assert.deepEqual(success.result, RESULTS[kind](), `${kind}: job:success carries the result`);
    }
    assert.equal((await sql.query(`select count(*)::int as n from job_queue.finished_jobs where result is null`)).rows[0].n, 1, 'undefined is SQL null');
  });

  it('results that JSON or jsonb cannot carry, or over maxJsonBytes, fail the attempt: the job is retried, not completed', async () => {
    const expectedCode: Record<string, string> = {
      bigint: 'JQ_RESULT_NOT_JSON',
      cycle: 'JQ_RESULT_NOT_JSON',
      nul: 'JQ_RESULT_NOT_JSON',
      loneSurrogate: 'JQ_RESULT_NOT_JSON',
      function: 'JQ_RESULT_NOT_JSON',
      tooLarge: 'JQ_RESULT_TOO_LARGE',
    };
    const kinds = Object.keys(expectedCode);
    const jobs = await t.jobs.addMany(kinds.map((kind) => ({ identifier: 'returns', payload: { kind } })));
    await t.worker.runUntilIdle();
    for (const [i, kind] of kinds.entries()) {
      const { id } = jobs[i];
      const { rows } = await sql.query(`select attempts, errors, last_error, locked_by from job_queue.jobs where id = $1`, [id]);
      assert.equal(rows.length, 1, `${kind}: still in jobs`);
      const [row] = rows;
      assert.deepEqual(row.errors.map((e: { code: string; attempt: number }) => [e.attempt, e.code]), [[1, expectedCode[kind]]], `${kind}: errors`);
      assert.match(row.last_error, new RegExp(`^${expectedCode[kind]}: `), `${kind}: last_error`);
      assert.equal(row.locked_by, null);
      assert.equal((await t.jobs.getJob(id))?.state, 'retrying', kind);
      assert.equal(await finishedRow(id), undefined, `${kind}: not finished`);
      assert.ok(events.some((e) => e.type === 'job:error' && e.job.id === id), `${kind}: job:error`);
      assert.ok(!events.some((e) => e.type === 'job:success' && e.job.id === id), `${kind}: no job:success`);
    }
  });

  it('payloads over maxJsonBytes, or holding U+0000 or a lone surrogate, are refused by add() and addMany(), and nothing is written', async () => {
    const large = { pad: 'x'.repeat(MAX_JSON_BYTES) };
    const largeInBytes = { pad: 'é'.repeat(500) }; // 510 characters, 1010 bytes
    const nul = { text: 'a\u0000b' };
    const lone = { text: 'a\ud83d' };
    const code = (expected: string) => ({ code: expected });
    await assert.rejects(t.jobs.add('quick', large), code('JQ_PAYLOAD_TOO_LARGE'));
    await assert.rejects(t.jobs.add('quick', largeInBytes), code('JQ_PAYLOAD_TOO_LARGE'));
    await assert.rejects(t.jobs.add('quick', nul), code('JQ_INVALID_PAYLOAD'));
    await assert.rejects(t.jobs.add('quick', lone), code('JQ_INVALID_PAYLOAD'));
    await assert.rejects(t.jobs.add('quick', large, { jobKey: 'k' }), code('JQ_PAYLOAD_TOO_LARGE'));
    // the good spec before the bad one is not written either, keyed or not
    await assert.rejects(t.jobs.addMany([{ identifier: 'quick' }, { identifier: 'quick', payload: large }]), code('JQ_PAYLOAD_TOO_LARGE'));
    await assert.rejects(t.jobs.addMany([{ identifier: 'quick', jobKey: 'a' }, { identifier: 'quick', payload: largeInBytes }]), code('JQ_PAYLOAD_TOO_LARGE'));
    await assert.rejects(t.jobs.addMany([{ identifier: 'quick' }, { identifier: 'quick', payload: nul }]), code('JQ_INVALID_PAYLOAD'));
    await assert.rejects(t.jobs.addMany([{ identifier: 'quick', jobKey: 'b' }, { identifier: 'quick', payload: lone }]), code('JQ_INVALID_PAYLOAD'));
    assert.equal((await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n, 0);
    // just under the limit is accepted
    const fits = await t.jobs.add('quick', { pad: 'x'.repeat(MAX_JSON_BYTES - 20) });
    assert.equal((await t.jobs.getJob(fits.id))?.state, 'waiting');
  });

  it('progress: job:progress carries each value at once; the store is written at most once a second, the last value always', async () => {
    const job = await t.jobs.add('progress-steps');
    const run = runInBackground();
    await waitFor('the handler to report and wait', () => gates.has(job.id));
    const reported = () => events.filter((e) => e.type === 'job:progress' && e.job.id === job.id).map((e) => e.type === 'job:progress' && e.progress);
    assert.deepEqual(reported(), [40, { step: 'b' }], 'both values emitted as they were reported');
    // the second value came within the second: written about a second after the first, while the job still runs
    await waitForValue(sql, 'the second value to be stored', `select progress = '{"step": "b"}' from job_queue.jobs where id = $1`, true, [job.id]);
    const writes = (await sql.query('select value, at from progress_writes where job_id = $1 order by seq', [job.id])).rows;
    assert.deepEqual(writes.map((w) => w.value), [40, { step: 'b' }]);
    assert.ok(writes[1].at.getTime() - writes[0].at.getTime() >= 900, `written ${writes[1].at - writes[0].at} ms apart`);
    await open(job.id);
    await run;
    assert.deepEqual((await finishedRow(job.id)).progress, { step: 'b' });
    assert.deepEqual((await t.jobs.getJob(job.id))?.progress, { step: 'b' });
  });

  it('progress: a burst of 100 values is stored a few times, and the last value is what the finished job keeps', async () => {
    const [waits, returns] = await t.jobs.addMany([
      { identifier: 'progress-burst', payload: { wait: true } },
      { identifier: 'progress-burst', payload: { wait: false } },
    ]);
    const run = runInBackground();
    // still running: the first value at once, the last one a second later
    await waitFor('the burst to be reported', () => gates.has(waits.id));
    await waitForValue(sql, 'the last value to be stored while the job runs', `select progress from job_queue.jobs where id = $1`, 100, [waits.id]);
    await open(waits.id);
    await run;
    const writesOf = async (id: string) => (await sql.query('select value from progress_writes where job_id = $1 order by seq', [id])).rows.map((r) => r.value);
    assert.deepEqual(await writesOf(waits.id), [1, 100], 'two writes for 100 values');
    assert.equal((await finishedRow(waits.id)).progress, 100);
    // returned right after its burst: the last value rode on the release
    assert.ok((await writesOf(returns.id)).length <= 1, `at most the first value written before the end: ${JSON.stringify(await writesOf(returns.id))}`);
    assert.equal((await finishedRow(returns.id)).progress, 100);
    assert.equal(events.filter((e) => e.type === 'job:progress' && e.job.id === returns.id).length, 100, 'every value emitted');
  });

  it('progress: bad values throw JQ_INVALID_PROGRESS in the handler and change nothing', async () => {
    progressOutcomes.clear();
    const job = await t.jobs.add('progress-bad');
    await t.worker.runUntilIdle();
    assert.deepEqual(
      Object.fromEntries(progressOutcomes),
      Object.fromEntries(BAD_PROGRESS.map(([name]) => [name, 'JQ_INVALID_PROGRESS'])),
    );
    const done = (await t.jobs.getJob(job.id))!;
    assert.equal(done.state, 'completed', 'the handler caught them and succeeded');
    assert.deepEqual(done.progress, NEAR_LIMIT_PROGRESS, 'the last good value is kept');
    const reported = events.filter((e) => e.type === 'job:progress' && e.job.id === job.id).map((e) => e.type === 'job:progress' && e.progress);
    assert.deepEqual(reported, [0, 100, NEAR_LIMIT_PROGRESS], 'bad values are not emitted');
  });

  it('progress: an object that is not plain, whose JSON is no object (a Date, a toJSON giving 500), throws JQ_INVALID_PROGRESS', async () => {
    progressOutcomes.clear();
    const job = await t.jobs.add('progress-bad', { odd: true });
    await t.worker.runUntilIdle();
    const odd = Object.fromEntries(ODD_PROGRESS.map(([name]) => [name, progressOutcomes.get(name)]));
    assert.deepEqual(odd, Object.fromEntries(ODD_PROGRESS.map(([name]) => [name, 'JQ_INVALID_PROGRESS'])));
    assert.deepEqual((await t.jobs.getJob(job.id))?.progress, NEAR_LIMIT_PROGRESS);
  });
});
