import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { waitFor, waitForValue } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses } from '../support/worker-processes';

/** Runs per job id of the in-process tasks, read after the worker has run (never asserted in a handler). */
const runs = new Map<string, number>();
/** While true, `flaky` fails (its only attempt: it fails for good). */
let flakyFails = true;

@Injectable()
class LocalTasks {
  @Task('count')
  async count(_payload: unknown, ctx: JobContext) {
    runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
    return { ran: ctx.job.id };
  }

  @Task('flaky', { maxAttempts: 1 })
  async flaky(_payload: unknown, ctx: JobContext) {
    runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
    if (flakyFails) throw Object.assign(new Error('flaky failed'), { code: 'FLAKY' });
    return 'ok';
  }
}

const HOUR_MS = 3_600_000;
/** A heartbeat that never comes during a test: whatever the worker learns, it learns by NOTIFY. */
const NO_HEARTBEAT = { HEARTBEAT_INTERVAL: '600000' };

const withCode = (code: string) => (error: { code?: string }) => {
  assert.equal(error.code, code, String(error));
  return true;
};

/**
 * cancelJob, the SQL cancel_job() and retryJobs, against the rows: jobs held by no worker,
 * by a worker in another process (running or prefetched), with the NOTIFY lost, and
 * handlers that ignore their signal. The in-process app is a producer (worker: false) whose
 * worker runs only in runUntilIdle(); the child processes run the tasks of worker-process.ts.
 */
/**
 * What cancelJob returns for a job a worker holds: the job read right after the cancel was
 * recorded, in its state then with cancelRequestedAt set, or already cancelled when its
 * worker heard the NOTIFY and wrote it before that read.
 */
function assertAskedToStop(job: { state: string; cancelRequestedAt: Date | null }, stateThen: string): void {
  if (job.state === 'cancelled') return;
  assert.equal(job.state, stateThen, 'a held job is only asked to stop');
  assert.ok(job.cancelRequestedAt, 'the cancel is recorded in its row');
}

describe('cancel and retry', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    ({ db, sql, t } = await openTestApp('lifecycle_cancel', {
      providers: [LocalTasks],
      jobQueue: { worker: false, externalTasks: ['await-cancel', 'ignore-cancel', 'record'] },
    }));
    await sql.query('create table handler_events (seq serial, job_id bigint not null, pid int not null, event text not null, code text)');
    await sql.query('create table handler_go (job_id bigint not null)');
    await sql.query('create table runs (job_id bigint not null, pid int not null, attempt int not null)');
  });
  afterEach(() => stopWorkerProcesses());
  after(() => closeTestApp({ db, sql, t }));

  const finishedRow = async (id: string) =>
    (await sql.query('select state, last_error, result, errors, attempts, started_at, worker_id from job_queue.finished_jobs where id = $1', [id])).rows[0];
  const jobsRow = async (id: string) =>
    (await sql.query('select attempts, run_at <= now() as due, errors, last_error, locked_by, started_at, cancel_requested_at from job_queue.jobs where id = $1', [id])).rows[0];
  /** Resolves once the job has left `jobs` for `finished_jobs`; returns its row there. */
  const finishedJob = async (id: string) => {
    await waitForValue(sql, `job ${id} to finish`, 'select count(*)::int from job_queue.finished_jobs where id = $1', 1, [id]);
    return finishedRow(id);
  };
  const handlerEvents = async (id: string) =>
    (await sql.query('select event, code from handler_events where job_id = $1 order by seq', [id])).rows;
  const waitForEvent = (id: string, event: string) =>
    waitForValue(sql, `job ${id}'s handler to record ${event}`, 'select count(*)::int from handler_events where job_id = $1 and event = $2', 1, [id, event]);
  const heartbeatAt = async (workerId: string) =>
    (await sql.query('select heartbeat_at::text as at from job_queue.workers where id = $1', [workerId])).rows[0].at as string;

  // A job no worker holds is cancelled in cancelJob's own statement, and no worker can claim it after.
  it('cancels a waiting and a scheduled job at once: finished as cancelled, gone from jobs, never run', async () => {
    const cancelledBefore = (await t.jobs.countJobs()).byState.cancelled;
    const waiting = await t.jobs.add('count');
    const scheduled = await t.jobs.add('count', {}, { runAt: new Date(Date.now() + HOUR_MS) });
    const control = await t.jobs.add('count');
    assert.equal(scheduled.state, 'scheduled');

    const cancelledWaiting = await t.jobs.cancelJob(waiting.id, 'not needed');
    const cancelledScheduled = await t.jobs.cancelJob(scheduled.id, 'plans changed');
    assert.equal(cancelledWaiting.state, 'cancelled');
    assert.equal(cancelledScheduled.state, 'cancelled');
    for (const [id, reason] of [[waiting.id, 'not needed'], [scheduled.id, 'plans changed']]) {
      const row = await finishedRow(id);
      assert.equal(row.state, 'cancelled');
      assert.equal(row.last_error, `JQ_JOB_CANCELLED: ${reason}`);
      assert.equal(row.result, null);
      assert.equal(await jobsRow(id), undefined, 'gone from jobs');
      const job = await t.jobs.getJob(id);
      assert.equal(job?.state, 'cancelled');
      assert.equal(job?.lastError, `JQ_JOB_CANCELLED: ${reason}`);
      assert.ok(job?.finishedAt);
    }
    assert.equal((await t.jobs.countJobs()).byState.cancelled, cancelledBefore + 2);

    await t.worker.runUntilIdle();
    assert.equal(runs.get(control.id), 1, 'the worker ran what was left');
    assert.equal(runs.get(waiting.id), undefined, 'the cancelled waiting job never ran');
    assert.equal(runs.get(scheduled.id), undefined, 'the cancelled scheduled job never ran');
  });

  // The NOTIFY reaches a worker in another process: its handler is aborted long before a heartbeat could have told it.
  it('cancels a job running in another process: its signal aborts with JQ_JOB_CANCELLED by NOTIFY, before any heartbeat', async () => {
    const [child] = await startWorkerProcesses(1, { url: db.url, env: NO_HEARTBEAT });
    const job = await t.jobs.add('await-cancel');
    await waitForEvent(job.id, 'started');
    const beat = await heartbeatAt(child.workerId!);

    const requested = await t.jobs.cancelJob(job.id, 'user asked');
    assertAskedToStop(requested, 'running');
    const row = await finishedJob(job.id);
    assert.equal(row.state, 'cancelled');
    assert.equal(row.last_error, 'JQ_JOB_CANCELLED: user asked');
    assert.equal(row.result, null);
    assert.equal(row.worker_id, child.workerId);
    assert.deepEqual(await handlerEvents(job.id), [
      { event: 'started', code: null },
      { event: 'aborted', code: 'JQ_JOB_CANCELLED' },
    ]);
    assert.equal(await heartbeatAt(child.workerId!), beat, 'no heartbeat since: the NOTIFY carried the cancel');
    assert.equal((await t.jobs.getJob(job.id))?.state, 'cancelled');

    // never again: once the child has run a later job, the cancelled one still started only once
    const later = await t.jobs.add('record');
    await waitForValue(sql, 'the child to run a later job', 'select count(*)::int from runs where job_id = $1', 1, [later.id]);
    assert.equal(await jobsRow(job.id), undefined);
    assert.equal((await handlerEvents(job.id)).filter((e) => e.event === 'started').length, 1);
  });

  // The row alone carries the cancel: a worker that never hears the NOTIFY finds it at its heartbeat.
  it('a cancel whose NOTIFY is lost is found at the next heartbeat', async () => {
    await startWorkerProcesses(1, { url: db.url, env: { HEARTBEAT_INTERVAL: '300' } });
    const job = await t.jobs.add('await-cancel');
    await waitForEvent(job.id, 'started');
    // what cancel_job() records for a held job, without its NOTIFY: as if the notification were lost
    await sql.query(`update job_queue.jobs set cancel_requested_at = now(), cancel_reason = 'notify lost' where id = $1`, [job.id]);

    const row = await finishedJob(job.id);
    assert.equal(row.state, 'cancelled');
    assert.equal(row.last_error, 'JQ_JOB_CANCELLED: notify lost');
    assert.deepEqual(await handlerEvents(job.id), [
      { event: 'started', code: null },
      { event: 'aborted', code: 'JQ_JOB_CANCELLED' },
    ]);
  });

  // The outcome is the row's, not the handler's: whether or not the worker heard the cancel, a returned value is not a completion.
  it('a handler that ignores its signal and returns a value still ends cancelled, with no result', async () => {
    await startWorkerProcesses(1, { url: db.url, env: NO_HEARTBEAT });
    const completedBefore = (await t.jobs.countJobs()).byState.completed;

    // heard: the signal aborts, the handler carries on and returns { ignored: true }
    const heard = await t.jobs.add('ignore-cancel');
    await waitForEvent(heard.id, 'started');
    await t.jobs.cancelJob(heard.id, 'stop please');
    await waitForEvent(heard.id, 'aborted');
    assert.equal((await t.jobs.getJob(heard.id))?.state, 'running', 'held until its handler settles');
    await sql.query('insert into handler_go values ($1)', [heard.id]);
    const heardRow = await finishedJob(heard.id);
    assert.deepEqual(
      { state: heardRow.state, result: heardRow.result, last_error: heardRow.last_error },
      { state: 'cancelled', result: null, last_error: 'JQ_JOB_CANCELLED: stop please' },
    );
    assert.deepEqual((await handlerEvents(heard.id)).map((e) => [e.event, e.code]), [
      ['started', null],
      ['aborted', 'JQ_JOB_CANCELLED'],
      ['returned', null],
    ]);

    // not heard (no NOTIFY, no heartbeat): the handler returns in peace, and the release still writes it cancelled
    const unheard = await t.jobs.add('ignore-cancel');
    await waitForEvent(unheard.id, 'started');
    await sql.query(`update job_queue.jobs set cancel_requested_at = now(), cancel_reason = 'quietly' where id = $1`, [unheard.id]);
    await sql.query('insert into handler_go values ($1)', [unheard.id]);
    const unheardRow = await finishedJob(unheard.id);
    assert.deepEqual(
      { state: unheardRow.state, result: unheardRow.result, last_error: unheardRow.last_error },
      { state: 'cancelled', result: null, last_error: 'JQ_JOB_CANCELLED: quietly' },
    );
    assert.deepEqual((await handlerEvents(unheard.id)).map((e) => e.event), ['started', 'returned'], 'its signal never aborted');

    assert.equal((await t.jobs.countJobs()).byState.completed, completedBefore, 'neither counted completed');
  });

  // A job claimed ahead but not started is dropped by its worker when the cancel comes: its handler never runs.
  it('a prefetched job (claimed behind a running one, not started) is cancelled without running', async () => {
    const [child] = await startWorkerProcesses(1, { url: db.url, concurrency: 1, env: NO_HEARTBEAT });
    // the worker prefetches nothing until jobs prove fast: a hundred no-op ones teach it
    await sql.query(`select job_queue.add_job('noop') from generate_series(1, 100)`);
    await waitForValue(sql, 'the warm-up jobs to run', `select count(*)::int from job_queue.jobs where task_identifier = 'noop'`, 0);

    const [blocker, victim] = await t.jobs.addMany([{ identifier: 'await-cancel' }, { identifier: 'record', priority: 1 }]);
    await waitForEvent(blocker.id, 'started');
    await waitFor(`job ${victim.id} to be claimed by ${child.workerId}`, async () => (await jobsRow(victim.id))?.locked_by === child.workerId);
    assert.equal((await jobsRow(victim.id)).started_at, null, 'claimed, not started');

    const requested = await t.jobs.cancelJob(victim.id, 'prefetched');
    assertAskedToStop(requested, 'waiting');
    const row = await finishedJob(victim.id);
    assert.equal(row.state, 'cancelled');
    assert.equal(row.last_error, 'JQ_JOB_CANCELLED: prefetched');
    assert.equal(row.started_at, null);
    assert.equal((await sql.query('select count(*)::int as n from runs where job_id = $1', [victim.id])).rows[0].n, 0, 'never ran');
    assert.deepEqual((await handlerEvents(blocker.id)).map((e) => e.event), ['started'], 'the running job was not touched');

    await t.jobs.cancelJob(blocker.id);
    assert.equal((await finishedJob(blocker.id)).state, 'cancelled');
  });

  // Finished is final: a cancel cannot rewrite history, and bad input is refused with its code.
  it('refuses to cancel a finished job (JQ_JOB_FINISHED, nothing changed), an unknown one and a bad id', async () => {
    flakyFails = true;
    const completed = await t.jobs.add('count');
    const failed = await t.jobs.add('flaky');
    const cancelled = await t.jobs.add('count');
    await t.jobs.cancelJob(cancelled.id);
    await t.worker.runUntilIdle();
    const ids = [completed.id, failed.id, cancelled.id];
    const snapshot = async () => (await sql.query('select * from job_queue.finished_jobs where id = any($1) order by id', [ids])).rows;
    const rows = await snapshot();
    assert.deepEqual(rows.map((r) => r.state), ['completed', 'failed', 'cancelled']);
    const counts = await t.jobs.countJobs();

    for (const id of ids) await assert.rejects(t.jobs.cancelJob(id, 'too late'), withCode('JQ_JOB_FINISHED'));
    assert.deepEqual(await snapshot(), rows);
    assert.deepEqual(await t.jobs.countJobs(), counts);

    await assert.rejects(t.jobs.cancelJob('999999999'), withCode('JQ_JOB_NOT_FOUND'));
    for (const bad of ['abc', '0', '-1', '1.5', '', '99999999999999999999']) {
      await assert.rejects(t.jobs.cancelJob(bad), withCode('JQ_INVALID_JOB_ID'), `cancelJob(${JSON.stringify(bad)})`);
    }
  });

  // Only failed and cancelled jobs come back, as new (attempts 0) but with their past errors, and they run to completion.
  it('retryJobs puts failed and cancelled jobs back (attempts 0, errors kept) and they run; other jobs are left alone', async () => {
    flakyFails = true;
    const failed = await t.jobs.add('flaky');
    const cancelled = await t.jobs.add('count');
    await t.jobs.cancelJob(cancelled.id, 'oops');
    const completed = await t.jobs.add('count');
    await t.worker.runUntilIdle();
    const unfinished = await t.jobs.add('count', {}, { runAt: new Date(Date.now() + HOUR_MS) });
    const unfinishedBefore = await jobsRow(unfinished.id);
    const completedBefore = await finishedRow(completed.id);
    assert.equal((await finishedRow(failed.id)).state, 'failed');

    flakyFails = false;
    const retried = await t.jobs.retryJobs([failed.id, cancelled.id, completed.id, unfinished.id]);
    assert.deepEqual(retried.map((j) => [j.id, j.state, j.attempts]).sort(), [[failed.id, 'waiting', 0], [cancelled.id, 'waiting', 0]].sort());
    const failedRow = await jobsRow(failed.id);
    assert.deepEqual({ attempts: failedRow.attempts, due: failedRow.due, locked_by: failedRow.locked_by }, { attempts: 0, due: true, locked_by: null });
    assert.deepEqual(failedRow.errors.map((e: { attempt: number; message: string; code: string }) => [e.attempt, e.message, e.code]), [[1, 'flaky failed', 'FLAKY']]);
    assert.equal((await jobsRow(cancelled.id)).attempts, 0);
    assert.equal(await finishedRow(failed.id), undefined, 'moved out of finished_jobs');
    assert.equal(await finishedRow(cancelled.id), undefined, 'moved out of finished_jobs');
    assert.deepEqual(await finishedRow(completed.id), completedBefore, 'a completed job is not retried');
    assert.deepEqual(await jobsRow(unfinished.id), unfinishedBefore, 'an unfinished job is not touched');
    assert.deepEqual(await t.jobs.retryJobs([completed.id, unfinished.id]), []);

    await t.worker.runUntilIdle();
    assert.equal(runs.get(failed.id), 2, 'the failed job ran again');
    assert.equal(runs.get(cancelled.id), 1, 'the cancelled job ran for the first time');
    const failedDone = await t.jobs.getJob(failed.id);
    assert.deepEqual([failedDone?.state, failedDone?.result, failedDone?.attempts], ['completed', 'ok', 1]);
    assert.deepEqual(failedDone?.errors.map((e) => e.message), ['flaky failed'], 'the old error kept');
    assert.equal((await t.jobs.getJob(cancelled.id))?.state, 'completed');
  });

  // A key taken by a newer unfinished job wins over the retry: never two unfinished jobs with one key.
  it('retryJobs leaves a job whose key a newer unfinished job holds', async () => {
    flakyFails = true;
    const old = await t.jobs.add('flaky', {}, { jobKey: 'nightly-report' });
    await t.worker.runUntilIdle();
    assert.equal((await finishedRow(old.id)).state, 'failed');
    const newer = await t.jobs.add('flaky', {}, { jobKey: 'nightly-report', runAt: new Date(Date.now() + HOUR_MS) });
    assert.notEqual(newer.id, old.id, 'the finished job freed its key');

    assert.deepEqual(await t.jobs.retryJobs([old.id]), []);
    assert.equal((await finishedRow(old.id)).state, 'failed', 'still failed in finished_jobs');
    const keyed = await sql.query(`select id::text from job_queue.jobs where key = 'nightly-report'`);
    assert.deepEqual(keyed.rows, [{ id: newer.id }]);
  });

  // SQL callers get the same outcomes: cancelled at once, requested (and heard by the worker), finished, not found.
  it('the SQL function cancel_job(id, reason) does what cancelJob does', async () => {
    const cancelSql = async (id: string, reason: string | null) =>
      (await sql.query('select outcome, state from job_queue.cancel_job($1::bigint, $2)', [id, reason])).rows;

    const waiting = await t.jobs.add('count');
    assert.deepEqual(await cancelSql(waiting.id, 'from sql'), [{ outcome: 'cancelled', state: 'cancelled' }]);
    const row = await finishedRow(waiting.id);
    assert.deepEqual([row.state, row.last_error], ['cancelled', 'JQ_JOB_CANCELLED: from sql']);
    assert.equal(await jobsRow(waiting.id), undefined);
    assert.deepEqual(await cancelSql(waiting.id, null), [{ outcome: 'finished', state: 'cancelled' }]);

    const completed = await t.jobs.add('count');
    await t.worker.runUntilIdle();
    assert.equal(runs.get(waiting.id), undefined, 'never ran');
    assert.deepEqual(await cancelSql(completed.id, null), [{ outcome: 'finished', state: 'completed' }]);
    assert.equal((await finishedRow(completed.id)).state, 'completed');
    assert.deepEqual(await cancelSql('999999999', null), [{ outcome: 'not_found', state: null }]);

    // a running job in another process: its worker hears the NOTIFY of the SQL call
    await startWorkerProcesses(1, { url: db.url, env: NO_HEARTBEAT });
    const running = await t.jobs.add('await-cancel');
    await waitForEvent(running.id, 'started');
    assert.deepEqual(await cancelSql(running.id, 'sql, running'), [{ outcome: 'requested', state: 'running' }]);
    const runningRow = await finishedJob(running.id);
    assert.deepEqual([runningRow.state, runningRow.last_error], ['cancelled', 'JQ_JOB_CANCELLED: sql, running']);
    assert.deepEqual((await handlerEvents(running.id)).map((e) => [e.event, e.code]), [
      ['started', null],
      ['aborted', 'JQ_JOB_CANCELLED'],
    ]);
  });
});
