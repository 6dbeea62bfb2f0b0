import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client, Pool } from 'pg';
import { JobEndedError, Task, type Job, type JobContext, type JobQueueEvent, type JobQueueModuleOptions } from '../../libs/job-queue/src';
import { JobWaiter } from '../../libs/job-queue/src/service/job-waiter';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { NotificationRecorder } from '../support/notifications';
import { waitFor, waitForNoJobs, waitForValue } from '../support/wait';

/** Opens the gate of a running `gate` job, by job id: its handler then returns { opened: true }. */
const gates = new Map<string, () => void>();

/** The tasks of the worker app; the producer app has none of them. */
@Injectable()
class LifecycleTasks {
  @Task('echo')
  async echo(payload: { n: number }) {
    return { doubled: payload.n * 2 };
  }

  /** Fails every attempt, at once (no backoff). */
  @Task('boom', { retryDelay: () => 0 })
  async boom(_payload: unknown, ctx: JobContext) {
    throw Object.assign(new Error(`boom ${ctx.job.attempts}`), { code: 'E_BOOM' });
  }

  /** Returns once the test opens its gate (or fails when its signal aborts). */
  @Task('gate')
  async gate(_payload: unknown, ctx: JobContext) {
    await new Promise<void>((resolve, reject) => {
      gates.set(ctx.job.id, resolve);
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason));
    });
    return { opened: true };
  }

  /** Runs until its signal aborts (a cancel). */
  @Task('hang')
  async hang(_payload: unknown, ctx: JobContext) {
    await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
  }
}

/** How a wait ended: code null and the job, or the error's code (and the job a JobEndedError carries). */
interface Outcome {
  code: string | null;
  job?: Job;
}

/** The pg pool under an app's DataSource, which the job queue's statements go through. */
function poolOf(app: TestApp): Pool {
  return (app.dataSource.driver as unknown as { master: Pool }).master;
}

function outcomeOf(wait: Promise<Job>): Promise<Outcome> {
  return wait.then(
    (job) => ({ code: null, job }),
    (error: { code?: string }) => ({ code: error.code ?? String(error), job: error instanceof JobEndedError ? error.job : undefined }),
  );
}

describe('waitForJob, from a producer-only app, on jobs run by another app', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  /** worker: false: it adds and waits, never runs a job. */
  let producer: TestApp;
  const workers: TestApp[] = [];
  const producerOptions: JobQueueModuleOptions = { worker: false, externalTasks: ['echo', 'boom', 'gate', 'hang', 'nobody'] };

  /** An app that runs the jobs ('nobody' has no handler anywhere: its jobs never run). */
  async function startWorkerApp(options: JobQueueModuleOptions = {}): Promise<TestApp> {
    const app = await createTestApp({ url: db.url, providers: [LifecycleTasks], jobQueue: { pollInterval: 200, ...options } });
    workers.push(app);
    return app;
  }

  async function closeWorkerApp(app: TestApp): Promise<void> {
    workers.splice(workers.indexOf(app), 1);
    await app.close();
  }

  before(async () => {
    db = await createTestDatabase('wait_for_job');
    sql = await connect(db.url);
    producer = await createTestApp({ url: db.url, jobQueue: producerOptions });
  });
  beforeEach(() => sql.query('delete from job_queue.jobs'));
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.close()));
  });
  after(async () => {
    await producer?.close();
    await sql?.end();
    await db?.drop();
  });

  // The basic promise: a producer that runs nothing learns the outcome and the result of a job run elsewhere.
  it('resolves with the completed job and the result its handler returned in the other app', async () => {
    const worker = await startWorkerApp();
    const added = await producer.jobs.add('echo', { n: 21 });
    const done = await producer.jobs.waitForJob<{ doubled: number }>(added.id);
    assert.equal(done.id, added.id);
    assert.equal(done.state, 'completed');
    assert.deepEqual(done.result, { doubled: 42 });
    assert.ok(done.finishedAt, 'finishedAt is set');
    assert.equal(done.workerId, worker.worker.workerId, 'run by the worker app, not the producer');
  });

  // A retried failure does not end the wait; the last one does, with the job's whole error history.
  it('rejects with JQ_JOB_FAILED, carrying the job and its errors, once the last attempt failed (not at the first)', async () => {
    await startWorkerApp();
    const added = await producer.jobs.add('boom', {}, { maxAttempts: 2 });
    const error = await producer.jobs.waitForJob(added.id).then(
      () => assert.fail('the wait resolved'),
      (e: unknown) => e,
    );
    assert.ok(error instanceof JobEndedError, `a JobEndedError: ${String(error)}`);
    assert.equal(error.code, 'JQ_JOB_FAILED');
    assert.equal(error.job.id, added.id);
    assert.equal(error.job.state, 'failed');
    assert.equal(error.job.attempts, 2, 'waited through the first failure, which was retried');
    assert.deepEqual(
      error.job.errors.map(({ attempt, message, code }) => ({ attempt, message, code })),
      [
        { attempt: 1, message: 'boom 1', code: 'E_BOOM' },
        { attempt: 2, message: 'boom 2', code: 'E_BOOM' },
      ],
    );
  });

  // Both cancel paths notify the waiter: the worker's release of a cancelled running job, and cancel_job() of an unclaimed one.
  it('rejects with JQ_JOB_CANCELLED when the job is cancelled while waited for: running in the other app, or not yet claimed', async () => {
    const worker = await startWorkerApp();
    const running = await producer.jobs.add('hang', {});
    await waitFor('the hang job to run in the worker app', async () => (await producer.jobs.getJob(running.id))?.state === 'running');
    const unclaimed = await producer.jobs.add('nobody', {});
    const waits = [running, unclaimed].map((job) => outcomeOf(producer.jobs.waitForJob(job.id)));
    await waitFor('both waits to be registered', () => producer.app.get(JobWaiter).waitedJobs === 2);
    await producer.jobs.cancelJob(running.id, 'no longer needed');
    await producer.jobs.cancelJob(unclaimed.id, 'never mind');
    const [ran, notRun] = await Promise.all(waits);
    assert.equal(ran.code, 'JQ_JOB_CANCELLED');
    assert.equal(ran.job?.state, 'cancelled');
    assert.equal(ran.job?.lastError, 'JQ_JOB_CANCELLED: no longer needed');
    assert.equal(ran.job?.workerId, worker.worker.workerId, 'the worker app wrote it');
    assert.equal(notRun.code, 'JQ_JOB_CANCELLED');
    assert.equal(notRun.job?.state, 'cancelled');
    assert.equal(notRun.job?.lastError, 'JQ_JOB_CANCELLED: never mind');
  });

  // A timeout ends the wait, not the job, and the waiter does not keep tracking it.
  it('rejects with JQ_WAIT_TIMEOUT after its timeout (a string or ms) for a job that never runs, and forgets the wait', async () => {
    await startWorkerApp();
    const never = await producer.jobs.add('nobody', {});
    for (const timeout of ['200ms', 200] as const) {
      const started = Date.now();
      await assert.rejects(producer.jobs.waitForJob(never.id, { timeout }), { code: 'JQ_WAIT_TIMEOUT' });
      assert.ok(Date.now() - started >= 199, `not before its timeout (${Date.now() - started} ms)`);
    }
    assert.equal((await producer.jobs.getJob(never.id))?.state, 'waiting', 'the job itself is untouched');
    assert.equal(producer.app.get(JobWaiter).waitedJobs, 0, 'no waiter is left behind');
  });

  // An id that never existed fails the wait at once instead of hanging.
  it('rejects with JQ_JOB_NOT_FOUND for an unknown id', async () => {
    const error = await producer.jobs.waitForJob('987654321').then(
      () => assert.fail('the wait resolved'),
      (e: unknown) => e,
    );
    assert.equal((error as { code?: string }).code, 'JQ_JOB_NOT_FOUND');
    assert.ok(!(error instanceof JobEndedError));
  });

  // The wait's own first read settles it: with no worker left, no notification could.
  it('settles at once for a job that had finished before the call, with no release left to hear', async () => {
    const worker = await startWorkerApp();
    const completed = await producer.jobs.add('echo', { n: 5 });
    const failed = await producer.jobs.add('boom', {}, { maxAttempts: 1 });
    const cancelled = await producer.jobs.add('nobody', {});
    await producer.jobs.cancelJob(cancelled.id);
    await waitForValue(sql, 'the echo and boom jobs to finish', 'select count(*)::int from job_queue.finished_jobs where id = any($1)', 2, [
      [completed.id, failed.id],
    ]);
    // no worker is left to release anything: the only way to settle is the wait's first read
    await closeWorkerApp(worker);
    // the timeout only turns a hang into a clear failure
    const [c, f, x] = await Promise.all([completed, failed, cancelled].map((job) => outcomeOf(producer.jobs.waitForJob(job.id, { timeout: '10s' }))));
    assert.equal(c.code, null);
    assert.equal(c.job?.state, 'completed');
    assert.deepEqual(c.job?.result, { doubled: 10 });
    assert.equal(f.code, 'JQ_JOB_FAILED');
    assert.equal(f.job?.state, 'failed');
    assert.equal(x.code, 'JQ_JOB_CANCELLED');
    assert.equal(x.job?.state, 'cancelled');
  });

  // The worst interleaving, made to happen: the wait's first read sees the job running, and
  // its release commits (and notifies) before that read's answer reaches the waiter. The
  // wait must hear it, for the first wait of an app (its LISTEN connection opening) and later.
  it("hears a release that commits between its first read and that read's answer", async () => {
    await startWorkerApp();
    const fresh = await createTestApp({ url: db.url, jobQueue: producerOptions });
    try {
      // twice: the first wait opens the app's LISTEN connection, the second finds it open
      for (const app of [fresh, fresh]) {
        const job = await app.jobs.add('gate', {});
        await waitFor('the gate job to run in the worker app', () => gates.has(job.id));
        const pool = poolOf(app);
        const query = pool.query;
        // the first read's answer: what it saw, handed over only once the release has committed
        let held: Array<Date | null> | undefined;
        pool.query = async function (this: Pool, ...args: unknown[]) {
          const result = await (query as (...a: unknown[]) => Promise<{ rows: Array<{ finished_at: Date | null }> }>).apply(this, args);
          const statement = args[0] as { name?: string; values?: unknown[][] };
          if (!held && statement.name?.endsWith('_getJobs') && statement.values?.[0]?.includes(job.id)) {
            held = result.rows.map((row) => row.finished_at);
            gates.get(job.id)!();
            await waitForValue(sql, 'the release to commit', 'select count(*)::int from job_queue.finished_jobs where id = $1', 1, [job.id]);
          }
          return result;
        } as typeof pool.query;
        try {
          const done = await app.jobs.waitForJob(job.id, { timeout: '20s' });
          assert.deepEqual(held, [null], 'the first read was held, and saw the job unfinished');
          assert.deepEqual(done.result, { opened: true });
        } finally {
          pool.query = query;
          gates.delete(job.id);
        }
      }
    } finally {
      await fresh.close();
    }
  });

  // LISTEN before read: a release committing just before, during or after a wait's first read
  // is never missed, not even by the first waits of an app, which race its LISTEN connection.
  it('misses no completion racing the call: for 300 jobs, waits started as each job starts or completes in the other app all resolve', async () => {
    const worker = await startWorkerApp({ concurrency: 10 });
    // a producer of its own, which has not listened yet
    const fresh = await createTestApp({ url: db.url, jobQueue: producerOptions });
    try {
      const total = 300;
      const byId = new Map<string, number>();
      const waits = new Map<string, Promise<Outcome>>();
      let settled = 0;
      const startWait = (id: string) => {
        if (waits.has(id)) return;
        const wait = outcomeOf(fresh.jobs.waitForJob(id));
        void wait.then(() => settled++);
        waits.set(id, wait);
      };
      // Even jobs are waited for as their handler returns (their release is still to come, in
      // a batch with others), odd ones as their handler starts.
      const subscription = worker.worker.events$.subscribe((event: JobQueueEvent) => {
        if (event.type !== 'job:start' && event.type !== 'job:success') return;
        const index = byId.get(event.job.id);
        if (index !== undefined && (event.type === 'job:success') === (index % 2 === 0)) startWait(event.job.id);
      });
      let jobs: Job[];
      try {
        jobs = await fresh.jobs.addMany(Array.from({ length: total }, (_, n) => ({ identifier: 'echo', payload: { n } })));
        jobs.forEach((job, n) => byId.set(job.id, n));
        await waitForNoJobs(sql);
      } finally {
        subscription.unsubscribe();
      }
      const raced = waits.size;
      // the few that ran before addMany's reply was read are waited for now, finished
      for (const job of jobs) startWait(job.id);
      await waitFor(() => `every wait to settle (${settled} of ${total} did)`, () => settled === total);
      assert.ok(raced >= total / 2, `most waits raced their job (${raced} of ${total})`);
      for (const [n, job] of jobs.entries()) {
        const outcome = await waits.get(job.id)!;
        assert.equal(outcome.code, null, `job ${job.id} resolved: ${JSON.stringify(outcome)}`);
        assert.equal(outcome.job?.state, 'completed');
        assert.deepEqual(outcome.job?.result, { doubled: n * 2 });
      }
    } finally {
      await fresh.close();
    }
  });

  // No polling per waiter: after each wait's first read, the producer reads only when a release notifies, one statement per notification.
  it('a thousand waiters cost one read per release notification, not one per waiter', async () => {
    const total = 1000;
    const jobs = await producer.jobs.addMany(Array.from({ length: total }, (_, n) => ({ identifier: 'echo', payload: { n } })));
    // every statement the producer sends through its pool (the waiter's reads go there)
    const pool = poolOf(producer);
    const query = pool.query;
    let sent = 0;
    let answered = 0;
    pool.query = function (this: Pool, ...args: unknown[]) {
      sent++;
      const result = (query as (...a: unknown[]) => Promise<unknown>).apply(this, args);
      void result.then(() => answered++, () => answered++);
      return result;
    } as typeof pool.query;
    const finished = await NotificationRecorder.listen(db.url, 'job_queue:finished');
    try {
      const waits = jobs.map((job) => outcomeOf(producer.jobs.waitForJob(job.id)));
      // each wait reads its job once when it starts (the jobs are unfinished: no worker yet)
      await waitFor(() => `the first read of each wait (${answered} answered)`, () => answered >= total);
      assert.equal(sent, total, 'one read per wait to start with');
      assert.equal(producer.app.get(JobWaiter).waitedJobs, total);
      await finished.barrier(); // nothing released before the worker starts

      sent = 0;
      await startWorkerApp({ concurrency: 20 });
      const outcomes = await Promise.all(waits);
      outcomes.forEach((outcome, n) => {
        assert.equal(outcome.code, null, `job ${jobs[n].id} resolved: ${JSON.stringify(outcome)}`);
        assert.deepEqual(outcome.job?.result, { doubled: n * 2 });
      });
      const releases = await finished.barrier();
      const named = new Set(releases.flatMap((payload) => payload.split(',')));
      assert.ok(jobs.every((job) => named.has(job.id)), 'every finished id was notified');
      assert.ok(sent <= releases.length, `at most one read per release notification: ${sent} reads, ${releases.length} notifications`);
      assert.ok(sent < total / 4, `far fewer reads than waiters: ${sent} reads for ${total} waiters`);
    } finally {
      pool.query = query;
      await finished.end();
    }
  });

  // Documented: a completion that keeps no row reads as an unknown job.
  it('with retention.completed 0 on the worker app, the waiter of a completed job gets JQ_JOB_NOT_FOUND', async () => {
    const added = await producer.jobs.add('echo', { n: 1 });
    const wait = outcomeOf(producer.jobs.waitForJob(added.id));
    await waitFor('the wait to be registered', () => producer.app.get(JobWaiter).waitedJobs === 1);
    await startWorkerApp({ retention: { completed: 0 } });
    const outcome = await wait;
    assert.equal(outcome.code, 'JQ_JOB_NOT_FOUND');
    const { rows } = await sql.query('select (select count(*)::int from job_queue.jobs) as jobs, (select count(*)::int from job_queue.finished_jobs where id = $1) as kept', [
      added.id,
    ]);
    assert.deepEqual(rows, [{ jobs: 0, kept: 0 }], 'it did complete, and left no row');
  });

  // Shutdown ends every wait (none hangs) and gives back the LISTEN connection; later waits are refused.
  it("the app's shutdown rejects pending waits with JQ_WAIT_TIMEOUT and closes the waiter's connection", async () => {
    const waiterName = `nestjs-job-queue waiter ${process.pid}`;
    const waiterPids = async () =>
      (
        await sql.query('select pid from pg_stat_activity where datname = current_database() and application_name = $1 order by pid', [waiterName])
      ).rows.map((r) => r.pid as number);
    // the shared producer has a waiter connection of its own, with the same name (same process)
    const before = await waiterPids();
    const other = await createTestApp({ url: db.url, jobQueue: producerOptions });
    let closed = false;
    try {
      const [never, neither] = await other.jobs.addMany([{ identifier: 'nobody' }, { identifier: 'nobody' }]);
      const outcomes: Outcome[] = [];
      for (const wait of [other.jobs.waitForJob(never.id), other.jobs.waitForJob(neither.id, { timeout: '1h' })]) void outcomeOf(wait).then((o) => outcomes.push(o));
      await waitFor('both waits to be registered', () => other.app.get(JobWaiter).waitedJobs === 2);
      let ours: number[] = [];
      await waitFor('the new app to have its waiter connection', async () => {
        ours = (await waiterPids()).filter((pid) => !before.includes(pid));
        return ours.length === 1;
      });

      await other.close();
      closed = true;
      await waitFor('both waits to be rejected', () => outcomes.length === 2);
      assert.deepEqual(
        outcomes.map((o) => o.code),
        ['JQ_WAIT_TIMEOUT', 'JQ_WAIT_TIMEOUT'],
      );
      // the server sees the disconnect a moment after the pool ended it
      await waitForValue(sql, 'the connection that listened to be gone', 'select count(*)::int from pg_stat_activity where pid = $1', 0, [ours[0]]);
      assert.deepEqual(await waiterPids(), before, 'no other waiter connection is left');
      await assert.rejects(other.jobs.waitForJob(never.id), { code: 'JQ_WAIT_TIMEOUT' }, 'a wait after the shutdown is refused');
    } finally {
      if (!closed) await other.close();
    }
  });
});
