import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { JobQueueEvent } from '../../libs/job-queue/src';
import { createTestApp } from '../support/app';
import { FIRST_RELEASE, OldWorkerProcess } from '../support/previous-version';
import { migrationNames, migrationsAfter, NewTasks, printed, type Run, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor, waitForValue } from '../support/wait';

const FIRST_MIGRATIONS = ['CreateJobTables1763700000000'];
const LATER_MIGRATIONS = migrationsAfter(FIRST_MIGRATIONS[0]);
/** What a worker of 0.1.0 gets as its timeout (the default of workers.timeout_ms, migration 2): it heartbeats every 10 s. */
const FIRST_RELEASE_TIMEOUT_MS = 30_000;
/** The new app's heartbeat (and so its maintenance rounds) and timeout: the sweeper judges itself, and orphaned locks, by 2 s. */
const NEW_HEARTBEAT_MS = 250;
const NEW_WORKER_TIMEOUT_MS = 2_000;
/** How long the old `sleep` jobs here run: longer than the test. */
const LONG_MS = 600_000;

type Rescued = Extract<JobQueueEvent, { type: 'job:rescued' }>;

/**
 * A rolling deploy from 0.1.0, the first release (0d7d0f2, migration 1 only), whose workers
 * have no timeout of their own: the new code migrates under two of its workers, one goes on
 * heartbeating, the other stalls (SIGSTOP) past its timeout and then resumes. What
 * docs/guarantees.md promises ("Delivery guarantees"): "During a rolling deploy from 0.1.0,
 * workers of the older version get a 30 s timeout (they heartbeat every 10 s) and are rescued
 * like any other, but 0.1.0 does not record that a job started: a job such a worker was
 * running goes back as a claimed one does (its attempt returned, no `JQ_WORKER_LOST`, due at
 * once). They do not fence themselves, so one that stalls past its timeout may go on claiming
 * under its old id until replaced (those claims are released again by the sweep's orphan
 * rule, and such a job may run twice, as in a stall)." The new leader's own timeout is 2 s
 * here, so that a sweep judging a 0.1.0 worker by it would declare it dead between two of its
 * heartbeats.
 */
describe('upgrading from 0.1.0 while its workers run: their timeout', () => {
  const u = upgradeSetup('upgrade_first_release', FIRST_RELEASE);
  const { q, ids } = u;
  const runsOf = (jobIds: string[]) =>
    q<Pick<Run, 'job_id' | 'pid' | 'attempt'>>('select job_id::text, pid, attempt from runs where job_id = any($1::bigint[]) order by job_id, n', [jobIds]);

  it('a 0.1.0 worker is judged by 30 s, rescued like any other, and the claims of one that stalled past it are released by the orphan rule', async () => {
    // a. Two workers of 0.1.0 on an empty database (its one migration); `stalling` runs the
    // jobs flagged b-only, `steady` none of them, nor those flagged stalled-only.
    const steady = await OldWorkerProcess.start(u.previous, u.db.url, { OLD_WORKER_FORBIDDEN_FLAGS: 'new-only,b-only,stalled-only' });
    assert.deepEqual(steady.library?.migrations, FIRST_MIGRATIONS, `${FIRST_RELEASE} knows one migration`);
    const stalling = await OldWorkerProcess.start(u.previous, u.db.url, { OLD_WORKER_FORBIDDEN_FLAGS: 'new-only' });
    assert.deepEqual(await migrationNames(u.sql), FIRST_MIGRATIONS);

    // b. The new code starts beside them and migrates; it runs neither kind of flagged job for now.
    let newForbidden = ['b-only', 'stalled-only'];
    const { logger, logs } = warningsLogger();
    const t = (u.app = await createTestApp({
      url: u.db.url,
      providers: [NewTasks],
      logger,
      jobQueue: { heartbeatInterval: NEW_HEARTBEAT_MS, workerTimeout: NEW_WORKER_TIMEOUT_MS, pollInterval: 200, forbiddenFlags: () => newForbidden },
    }));
    const rescued: Rescued[] = [];
    t.worker.events$.subscribe((event) => event.type === 'job:rescued' && rescued.push(event));
    assert.deepEqual(await migrationNames(u.sql), [...FIRST_MIGRATIONS, ...LATER_MIGRATIONS]);
    const [migrated] = await q<{ at: Date }>('select applied_at as at from job_queue.migrations where name = $1', [LATER_MIGRATIONS[0]]);
    const workerIds = [steady.workerId!, stalling.workerId!, t.worker.workerId];
    assert.deepEqual(
      await q('select id, timeout_ms from job_queue.workers where id = any($1::text[]) order by array_position($1::text[], id)', [workerIds]),
      [
        { id: steady.workerId, timeout_ms: FIRST_RELEASE_TIMEOUT_MS },
        { id: stalling.workerId, timeout_ms: FIRST_RELEASE_TIMEOUT_MS },
        { id: t.worker.workerId, timeout_ms: NEW_WORKER_TIMEOUT_MS },
      ],
      'the workers of 0.1.0 got a 30 s timeout; the new one has its own',
    );
    // they heartbeat every 10 s, on the migrated schema, and stay alive meanwhile
    await waitFor('a heartbeat of each 0.1.0 worker after the migration', async () => {
      const rows = await q<{ beat: boolean }>('select heartbeat_at > $2 as beat from job_queue.workers where id = any($1::text[])', [workerIds.slice(0, 2), migrated.at]);
      assert.equal(rows.length, 2, 'the new leader declared a 0.1.0 worker dead between two of its heartbeats');
      return rows.every((row) => row.beat);
    });

    // c. One of them runs three long jobs, claimed on the migrated schema, and stalls. The
    // other goes on heartbeating every 10 s while the new leader sweeps every 250 ms.
    const held = await ids(
      `select j.id::text from generate_series(1, 3) g cross join lateral job_queue.add_job('sleep', jsonb_build_object('ms', $1::int, 'n', g), flags => '{b-only}') j order by j.id`,
      [LONG_MS],
    );
    for (const id of held) await printed(stalling, `started sleep ${id}`);
    stalling.pause();
    let lastBeat: Date | undefined;
    await waitFor('the new leader to declare the stalled 0.1.0 worker dead', async () => {
      const [row] = await q<{ heartbeat_at: Date }>('select heartbeat_at from job_queue.workers where id = $1', [stalling.workerId]);
      if (row) lastBeat = row.heartbeat_at;
      return !row;
    });
    assert.ok(lastBeat, 'the stalled worker had a row');
    assert.deepEqual(
      await q('select id from job_queue.workers where id = $1', [steady.workerId]),
      [{ id: steady.workerId }],
      'the 0.1.0 worker that heartbeats every 10 s is alive: judged by its 30 s, not by the 2 s of the sweeper',
    );
    // Rescued like any other: its jobs released, no sooner than 30 s after its last heartbeat
    // (the rescue's updated_at; lastBeat, read in ms, is at most the real one). 0.1.0 never
    // records that a job started, so they go back as claimed jobs do: the attempt returned, due at once.
    const after = await q<{ id: string; locked_by: string | null; attempts: number; last_error: string | null; due: boolean; ms: number }>(
      `select id::text, locked_by, attempts, last_error, run_at <= now() as due, extract(epoch from updated_at - $2::timestamptz)::float8 * 1000 as ms
         from job_queue.jobs where id = any($1::bigint[]) order by id`,
      [held, lastBeat],
    );
    assert.deepEqual(
      after.map(({ ms, ...job }) => job),
      held.map((id) => ({ id, locked_by: null, attempts: 0, last_error: null, due: true })),
      'the stalled worker\'s jobs were released, as claimed ones, their attempt returned',
    );
    for (const job of after) assert.ok(job.ms >= FIRST_RELEASE_TIMEOUT_MS, `job ${job.id} was rescued ${job.ms} ms after the last heartbeat, not after 30 s`);
    assert.deepEqual(
      rescued.map(({ jobId, deadWorkerId, started, failed }) => ({ jobId, deadWorkerId, started, failed })),
      held.map((jobId) => ({ jobId, deadWorkerId: stalling.workerId, started: false, failed: false })),
    );
    newForbidden = ['stalled-only'];
    await waitForValue(u.sql, 'the new worker to run the rescued jobs', 'select count(*)::int from runs where job_id = any($1::bigint[]) and pid = $2', held.length, [held, process.pid]);
    await waitForValue(u.sql, 'the rescued jobs to be released', 'select count(*)::int from job_queue.jobs where id = any($1::bigint[])', 0, [held]);
    assert.deepEqual(await runsOf(held), held.map((id) => ({ job_id: id, pid: process.pid, attempt: 1 })), 'each rescued job ran once, in the new app');

    // d. The stalled worker resumes: it does not fence itself, and claims under its old id
    // (one slot is free: it still believes it runs the three long jobs).
    const [late] = await ids(`select id::text from job_queue.add_job('sleep', jsonb_build_object('ms', $1::int), flags => '{stalled-only}')`, [LONG_MS]);
    stalling.resume();
    await printed(stalling, `started sleep ${late}`);
    assert.deepEqual(await q('select id from job_queue.workers where id = $1', [stalling.workerId]), [], 'it claimed with no row of its own: a 0.1.0 worker does not rejoin');

    // e. The sweep's orphan rule releases that claim (a lock older than the sweeper's timeout
    // whose worker has no row), and the new worker runs the job; the stalled one, its slots
    // full, does not claim it again.
    newForbidden = [];
    await waitForValue(u.sql, "the orphan rule to release the resumed worker's claim, and the new worker to run the job", 'select count(*)::int from runs where job_id = $1 and pid = $2', 1, [late, process.pid]);
    assert.deepEqual(rescued.at(-1), { type: 'job:rescued', jobId: late, taskIdentifier: 'sleep', deadWorkerId: stalling.workerId, started: false, failed: false });
    await waitForValue(u.sql, 'the job to be released', 'select count(*)::int from job_queue.jobs where id = $1', 0, [late]);
    assert.deepEqual(await runsOf([late]), [{ job_id: late, pid: process.pid, attempt: 1 }]);
    assert.equal(stalling.output.match(new RegExp(`^started sleep ${late}$`, 'gm'))?.length, 1, 'the resumed worker claimed it once');

    assert.deepEqual(await q('select id from job_queue.workers where id = $1', [steady.workerId]), [{ id: steady.workerId }], 'the steady 0.1.0 worker is still alive');
    assert.deepEqual(
      logs.filter((line) => /declared dead/.test(line)),
      [`warn [JobQueueMaintenance] Worker ${stalling.workerId} stopped heartbeating: declared dead`],
      'the new leader declared only the stalled worker dead',
    );
    for (const worker of [steady, stalling]) assert.doesNotMatch(worker.output, /failed, retrying|Error/, `the 0.1.0 worker ${worker.pid} reported no error`);
  });
});
