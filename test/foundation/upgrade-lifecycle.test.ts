import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { JobEndedError, Task, type Job, type JobContext } from '../../libs/job-queue/src';
import { createTestApp } from '../support/app';
import { OldWorkerProcess, OPERATIONS_VERSION, PREVIOUS_VERSION } from '../support/previous-version';
import { NewTasks, printed, recordRun, sortIds, upgradeSetup, warningsLogger, type Run } from '../support/upgrade';
import { HANG_MS, waitFor, waitForValue } from '../support/wait';

/** The new app's concurrency in the localStart test: every slot is taken by a job started at its add. */
const HELD = 3;
/** The new app's heartbeatInterval in the cancel test: its maintenance leader moves leftover rows to finished_jobs at each round. */
const NEW_HEARTBEAT_MS = 250;

/** Gates of the new app's `sleep` jobs (GatedTasks): a handler waits for its gate, which the test opens. */
const gates = new Map<string, { opened: Promise<void>; open: () => void }>();
function gate(name: string) {
  let entry = gates.get(name);
  if (!entry) {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    gates.set(name, (entry = { opened, open }));
  }
  return entry;
}
/** The jobs whose `sleep` handler has started in the new app. */
const startedHere = new Set<string>();

/** The new version's handlers for the localStart test: `record` as NewTasks', `sleep` held until its gate opens. */
@Injectable()
class GatedTasks {
  constructor(private readonly dataSource: DataSource) {}

  @Task('record')
  async record(payload: unknown, ctx: JobContext) {
    await recordRun(this.dataSource, payload, ctx);
  }

  /** Waits for its gate, or for its signal (the app closing after a failed test): aborted, it throws. */
  @Task('sleep')
  async sleep(payload: { gate: string }, ctx: JobContext) {
    startedHere.add(ctx.job.id);
    await new Promise<void>((resolve, reject) => {
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
      void gate(payload.gate).opened.then(resolve);
    });
    await recordRun(this.dataSource, payload, ctx);
  }
}

/**
 * A job started at its add (localStart) while a worker of the previous release (f2489f6,
 * which predates localStart) claims from the same table. What the docs promise of such a job
 * (docs/guarantees.md, "The worker"): "the insert claims the job for it in the same statement:
 * `add()` returns it `running`, attempt 1, `lockedBy` that worker, and its handler starts as
 * the insert returns, with no NOTIFY (no other worker looks for it)", and "Such a job is a
 * claimed job from then on"; and of a rolling deploy (docs/guides/migrations.md): "replicas of
 * this version keep working while a newer one migrates". So the old worker, whose claim
 * knows nothing of localStart, must find such a job already taken: it runs once, in the new app.
 */
describe('add() with localStart beside a worker of the previous release', () => {
  const u = upgradeSetup('upgrade_local_start', OPERATIONS_VERSION);
  const runsOf = (jobIds: string[]) =>
    u.q<Pick<Run, 'job_id' | 'pid' | 'attempt'>>('select job_id::text, pid, attempt from runs where job_id = any($1::bigint[]) order by job_id, n', [jobIds]);

  it('a job started at its add runs once, in the new app: the old worker claims beside it and never takes it', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    const { logger, logs } = warningsLogger();
    // No poll: the new worker claims only when a NOTIFY wakes it, so that nothing is on its way when the test adds.
    const t = (u.app = await createTestApp({
      url: u.db.url,
      providers: [GatedTasks],
      logger,
      jobQueue: { concurrency: HELD, pollInterval: 600_000, forbiddenFlags: ['old-only'] },
    }));
    // both versions at work on the migrated schema (the old app's adds wake the new worker too)
    const warmUp = await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { warmUp: n } })));
    await waitForValue(u.sql, 'the warm-up jobs to run', 'select count(*)::int from runs where job_id = any($1::bigint[])', 10, [warmUp]);
    await t.worker.runUntilIdle(); // no claim of the new worker on its way: its free slots are its own

    // a. Jobs started at their add: the new worker's slots all taken by them, held until the test lets them go.
    const held: Job[] = [];
    for (let n = 1; n <= HELD; n++) held.push(await t.jobs.add('sleep', { ms: 0, gate: 'local', n }));
    for (const job of held) {
      assert.deepEqual([job.state, job.lockedBy, job.attempts], ['running', t.worker.workerId, 1], `job ${job.id} started at its add, in the new app`);
    }
    const heldIds = held.map((job) => job.id);
    await waitFor('the new app to start the held jobs', () => heldIds.every((id) => startedHere.has(id)));

    // b. A positive sign that the old worker has claimed since: a job only it runs (a flag the
    // new app forbids), added later, whose NOTIFY wakes it. Its claim takes available jobs by
    // (priority, run_at, id), up to its 4 slots: had the held jobs been claimable, it would have
    // taken them first (the old `sleep` of { ms: 0 } records its run at once).
    const marker = await t.jobs.add('record', { marker: 1 }, { flags: ['old-only'] });
    assert.equal(marker.state, 'waiting', 'a job with a flag the new app forbids goes through the table');
    await waitForValue(u.sql, 'the old worker to run the job only it may run', 'select count(*)::int from runs where job_id = $1 and pid = $2', 1, [marker.id, old.pid]);
    assert.deepEqual(await runsOf(heldIds), [], 'no one ran a held job: the old worker did not take any');
    assert.doesNotMatch(old.output, /^started sleep /m, 'the old worker started none of them');
    assert.deepEqual(
      await u.q('select id::text, locked_by, attempts from job_queue.jobs where id = any($1::bigint[]) order by id', [heldIds]),
      heldIds.map((id) => ({ id, locked_by: t.worker.workerId, attempts: 1 })),
      'the new worker still holds them, at their first attempt',
    );

    // c. Let go: each completes once, in the new app.
    gate('local').open();
    await waitForValue(u.sql, 'the held jobs to complete', `select count(*)::int from job_queue.finished_jobs where id = any($1::bigint[]) and state = 'completed'`, HELD, [heldIds]);
    assert.deepEqual(await runsOf(heldIds), heldIds.map((id) => ({ job_id: id, pid: process.pid, attempt: 1 })), 'each held job ran once, in the new app');
    assert.deepEqual(
      await u.q('select id::text, worker_id, attempts from job_queue.finished_jobs where id = any($1::bigint[]) order by id', [heldIds]),
      heldIds.map((id) => ({ id, worker_id: t.worker.workerId, attempts: 1 })),
    );

    // d. Side by side: a burst of adds in the new app (those that find a free slot start at
    // their add, the others go through the table to either version) and jobs the old app adds.
    const burst = await Promise.all(Array.from({ length: 30 }, (_, n) => t.jobs.add('record', { burst: n })));
    const byOld = await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { byOld: n } })));
    const all = [...burst.map((job) => job.id), ...byOld];
    await waitForValue(u.sql, 'every job of the burst to run', 'select count(*)::int from runs where job_id = any($1::bigint[])', all.length, [all]);
    await waitForValue(u.sql, 'every job of the burst to be released', 'select count(*)::int from job_queue.jobs where id = any($1::bigint[])', 0, [all]);
    const runs = await runsOf(all);
    assert.deepEqual(runs.map((run) => run.job_id), sortIds(all), 'each job of the burst ran once');
    const startedAtAdd = burst.filter((job) => job.state === 'running').map((job) => job.id);
    assert.deepEqual(
      runs.filter((run) => startedAtAdd.includes(run.job_id) && run.pid !== process.pid),
      [],
      `the jobs of the burst that started at their add (${startedAtAdd.length}) ran in the new app`,
    );
    assert.doesNotMatch(old.output, /failed, retrying|add failed|Error/, 'the old worker reported no error');
    assert.deepEqual(logs, [], 'the new app neither warned nor erred');
  });
});

/**
 * A cancel in the new app of a job that a worker of the release before the job lifecycle
 * (be5c87e: no cancel, no finished_jobs) runs. What docs/guarantees.md promises ("Delivery
 * guarantees"): "During a rolling deploy from the release before the job lifecycle, its
 * workers go on deleting the jobs they complete (no history, no result) and leave the jobs
 * they fail for good in `jobs`; the new maintenance leader moves those to `finished_jobs`
 * (state `failed`). They do not hear cancels: a cancel of a job such a worker runs takes
 * effect only if the attempt fails (it then ends `cancelled`); if it succeeds, it is gone, and
 * until the new leader's next round such a worker may even claim the cancelled job again."
 * (The old `hold` task retries an hour later, so that the last case does not race the leader.)
 */
describe('cancelJob() of a job a worker of the release before the job lifecycle runs', () => {
  const u = upgradeSetup('upgrade_cancel', PREVIOUS_VERSION);
  const runsOf = (id: string) => u.q<Pick<Run, 'pid' | 'attempt'>>('select pid, attempt from runs where job_id = $1 order by n', [id]);
  const finished = (id: string) =>
    u.q('select state, attempts, last_error, worker_id, result from job_queue.finished_jobs where id = $1', [id]);

  it('the old worker does not hear it: a success deletes the job, a failure ends it cancelled, moved by the new leader', async () => {
    // The new app starts first, so that it leads maintenance (an old leader keeps the lease for
    // as long as it runs); the old replica starts on the migrated schema, as one restarting
    // during the deploy does (upgrade.test.ts migrates under a running one).
    const { logger, logs } = warningsLogger();
    const t = (u.app = await createTestApp({
      url: u.db.url,
      providers: [NewTasks],
      logger,
      jobQueue: { heartbeatInterval: NEW_HEARTBEAT_MS, pollInterval: 200, externalTasks: ['hold', 'fail'] },
    }));
    await waitFor('the new app to lead maintenance', async () => (await u.q<{ holder: string }>(`select holder from job_queue.leases where name = 'maintenance'`))[0]?.holder === t.worker.workerId);
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, ['CreateJobTables1763700000000', 'RecoveryAndQueueOrder1763800000000'], `${PREVIOUS_VERSION} predates the job lifecycle`);

    // a. Cancelled while the old worker runs it, which then succeeds: the job is gone.
    const succeeds = await t.jobs.add('hold', { gate: 'succeeds' });
    await printed(old, `started hold ${succeeds.id}`);
    const requested = await t.jobs.cancelJob(succeeds.id, 'no longer wanted');
    assert.equal(requested.state, 'running', 'a running job is not cancelled at once: its cancel is requested');
    assert.ok(requested.cancelRequestedAt instanceof Date);
    // A positive sign that the new leader has had a round since the cancel: a job the old worker
    // fails for good after it, left in jobs, which the leader moves to finished_jobs, failed.
    const failed = await t.jobs.add('fail', { n: 1 }, { maxAttempts: 1 });
    await waitForValue(u.sql, 'the new leader to move the job the old worker failed for good', 'select state from job_queue.finished_jobs where id = $1', 'failed', [failed.id]);
    assert.deepEqual(await finished(failed.id), [{ state: 'failed', attempts: 1, last_error: 'failed on purpose', worker_id: null, result: null }]);
    assert.deepEqual(
      await u.q('select locked_by, cancel_reason from job_queue.jobs where id = $1', [succeeds.id]),
      [{ locked_by: old.workerId, cancel_reason: 'no longer wanted' }],
      'the leader left the cancelled job to the old worker that runs it',
    );
    assert.equal((await t.jobs.getJob(succeeds.id))?.state, 'running');
    assert.doesNotMatch(old.output, new RegExp(`^finished hold ${succeeds.id}$`, 'm'), 'the old worker is still running it');
    await old.open('succeeds');
    await printed(old, `finished hold ${succeeds.id}`);
    await waitForValue(u.sql, 'the old worker to complete the job', 'select count(*)::int from job_queue.jobs where id = $1', 0, [succeeds.id]);
    assert.equal(await t.jobs.getJob(succeeds.id), null, 'a cancelled job whose attempt succeeded is gone: no history, no result');
    assert.deepEqual(await finished(succeeds.id), []);
    assert.deepEqual(await runsOf(succeeds.id), [{ pid: old.pid, attempt: 1 }], 'its handler ran once, to the end');

    // b. Cancelled while the old worker runs it, which then fails with attempts left: cancelled.
    const fails = await t.jobs.add('hold', { gate: 'fails', fail: 'failed after the cancel' }, { maxAttempts: 3 });
    await printed(old, `started hold ${fails.id}`);
    assert.equal((await t.jobs.cancelJob(fails.id, 'changed my mind')).state, 'running');
    const waited = t.jobs.waitForJob(fails.id, { timeout: HANG_MS }).then(
      (job) => job,
      (error: unknown) => error,
    );
    await old.open('fails');
    const ended = await waited;
    assert.ok(ended instanceof JobEndedError, `waitForJob rejects with the end of the job: ${String(ended)}`);
    assert.equal(ended.code, 'JQ_JOB_CANCELLED', 'the waiter learns that the job was cancelled');
    assert.equal(ended.job.state, 'cancelled');
    // (The waiter may have read it in jobs, released by the old worker and not moved yet: cancelled there too.)
    await waitForValue(u.sql, 'the new leader to move the cancelled job to finished_jobs', 'select count(*)::int from job_queue.finished_jobs where id = $1', 1, [fails.id]);
    assert.deepEqual(
      await finished(fails.id),
      [{ state: 'cancelled', attempts: 1, last_error: 'JQ_JOB_CANCELLED: changed my mind', worker_id: null, result: null }],
      'the failed attempt of a cancelled job ends it cancelled, in finished_jobs',
    );
    assert.equal((await t.jobs.getJob(fails.id))?.state, 'cancelled');
    assert.match(old.output, new RegExp(`^.*Job ${fails.id} \\(hold\\) failed attempt 1/3, retrying at .*: failed after the cancel$`, 'm'), 'the old worker failed the attempt, to retry it');
    assert.deepEqual(await runsOf(fails.id), [{ pid: old.pid, attempt: 1 }], 'its handler ran once');
    assert.deepEqual(await u.q('select id from job_queue.jobs'), [], 'nothing is left in jobs');
    assert.deepEqual(logs, [], 'the new app neither warned nor erred');
  });
});
