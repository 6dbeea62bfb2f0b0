import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { installPreviousVersion, OldWorkerProcess, PREVIOUS_VERSION, stopOldWorkers, type PreviousVersionApp } from '../support/previous-version';
import { createRunsTable, migrationNames, migrationsAfter, NewTasks, printed, range, type Run, sortIds, warningsLogger } from '../support/upgrade';
import { waitFor, waitForValue } from '../support/wait';

const OLD_MIGRATIONS = ['CreateJobTables1763700000000', 'RecoveryAndQueueOrder1763800000000'];
const NEW_MIGRATION = 'JobLifecycle1763900000000';
/** The migration after it, which this test applies too (upgrade-operations.test.ts tests its own upgrade). */
const LATER_MIGRATIONS = migrationsAfter(NEW_MIGRATION);
/** How long the old worker's two `sleep` jobs run: they must outlast the new app's boot and migration. */
const SLEEP_MS = 4_000;
/** The unnamed `record` jobs added before the upgrade come due one by one over this long, so that both versions run them. */
const STAGGER_MS = 40;
/** The new app's heartbeatInterval: its maintenance leader moves the leftover rows to finished_jobs at each tick. */
const NEW_HEARTBEAT_MS = 250;
/** What the old worker's `fail` task throws (old-worker.js). */
const FAIL_MESSAGE = 'failed on purpose';
/** The key of a job the old version failed for good: free again once the job has left `jobs`. */
const FAILED_KEY = 'upgrade-failed';

/** The columns of a job that nothing may change while it waits (the upgrade neither). */
const SNAPSHOT = `select id::text, task_identifier, payload, queue_name, priority, run_at, attempts, max_attempts, last_error, key,
  revision, flags, locked_at, locked_by, created_at, updated_at from job_queue.jobs j where j.id = any($1::bigint[]) order by j.id`;
/** What a job keeps when it moves from `jobs` to `finished_jobs`: the columns the two tables share. */
const KEPT = 'id::text, task_identifier, queue_name, payload, priority, run_at, attempts, max_attempts, key, flags, created_at, last_error';
/** How many of the jobs $1 are in `jobs` as the old version leaves a job that failed for good: unlocked, out of attempts. */
const LEFTOVERS = 'select count(*)::int from job_queue.jobs where id = any($1::bigint[]) and locked_at is null and attempts >= max_attempts';
/** The old worker's report of a job that failed for good. */
const FAILED_FOR_GOOD = /^.*Job (\d+) \((\w+)\) failed for good after \d+ attempt\(s\): (.*)$/gm;

/**
 * A rolling deploy of the release that adds migration 3 (finished jobs kept in
 * `finished_jobs`): the database holds every kind of job, among them jobs the previous
 * version failed for good and left in `jobs`; a worker of the previous version (the package
 * as it was at commit PREVIOUS_VERSION, packed in test/fixtures) is running some of them;
 * and the new code starts beside it and migrates (columns added, tables and SQL functions
 * created or replaced, an index built concurrently). Both versions then run the queue side
 * by side until the old one is stopped with SIGTERM, and the new one leads.
 */
describe('upgrading a populated database while workers of the previous version run', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let previous: PreviousVersionApp;
  let t: TestApp | undefined;

  before(async () => {
    db = await createTestDatabase('upgrade');
    sql = await connect(db.url);
    await createRunsTable(sql);
    previous = installPreviousVersion();
  });
  afterEach(async () => {
    await t?.close();
    t = undefined;
    await stopOldWorkers();
  });
  after(async () => {
    await sql?.end();
    await db?.drop();
    previous?.remove();
  });

  const q = async <Row = Record<string, unknown>>(text: string, values: unknown[] = []) => (await sql.query(text, values)).rows as Row[];
  const ids = async (text: string, values: unknown[] = []) => (await q<{ id: string }>(text, values)).map((row) => row.id);
  /** Every run the handlers recorded, by job id, in the order they ran. */
  const runsByJob = async () => {
    const runs = await q<Run>('select job_id::text, pid, attempt, task, payload, at from runs order by n');
    const byJob = new Map<string, Run[]>();
    for (const run of runs) byJob.set(run.job_id, [...(byJob.get(run.job_id) ?? []), run]);
    return { runs, byJob };
  };
  /** The rows of `finished_jobs` for the jobs `jobIds`, by id. */
  const finished = (jobIds: string[], columns = 'id::text, state') => q(`select ${columns} from job_queue.finished_jobs f where f.id = any($1::bigint[]) order by f.id`, [jobIds]);

  it('the old worker keeps running and finishes its jobs, every job runs once, queues keep their order, failed jobs move to finished_jobs', async (ctx) => {
    // a. The previous version on an empty database: it applies both migrations it knows.
    const old = await OldWorkerProcess.start(previous, db.url);
    assert.ok(old.library?.path.startsWith(previous.dir), `the old app loaded the packed library, not the repository's: ${old.library?.path}`);
    assert.deepEqual(old.library?.migrations, OLD_MIGRATIONS, `the library of ${PREVIOUS_VERSION} knows the first two migrations`);
    assert.deepEqual(await migrationNames(sql), OLD_MIGRATIONS);
    const oldId = old.workerId!;

    // b. A populated database. The old app's own service adds jobs first (so that its
    // connections have add_job and the insert statements prepared before the schema changes),
    // and some that its worker fails for good (max_attempts 1), one of them keyed.
    const addedByOldBefore = [
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before', n } })))),
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before-many', n } })), { many: true })),
    ];
    const failedByOld = await old.add(
      [
        { identifier: 'fail', payload: { n: 1 }, maxAttempts: 1, jobKey: FAILED_KEY },
        { identifier: 'fail', payload: { n: 2 }, maxAttempts: 1 },
      ],
      { many: true },
    );
    await sql.query('begin');
    // Named queues: q-a and q-b each headed by a sleep, which holds its queue (locked by the
    // old worker) across the migration; q-c runs right away. All due now: their order is the
    // queue's (priority, run_at, id), which the claims of both versions must keep.
    const sleeps: string[] = [];
    const queued: string[] = [];
    for (const queue of ['q-a', 'q-b', 'q-c']) {
      if (queue !== 'q-c') {
        sleeps.push(...(await ids(`select id::text from job_queue.add_job('sleep', $1, queue_name => $2)`, [{ ms: SLEEP_MS, queue, seq: 0 }, queue])));
      }
      for (let seq = 1; seq <= 20; seq++) {
        queued.push(...(await ids(`select id::text from job_queue.add_job('record', $1, queue_name => $2)`, [{ queue, seq }, queue])));
      }
    }
    // 140 unnamed ones coming due one by one, before, during and after the upgrade
    const staggered = await ids(
      `select j.id::text from generate_series(1, 140) g
         cross join lateral job_queue.add_job('record', jsonb_build_object('staggered', g), run_at => now() + g * $1 * interval '1 millisecond') j
       order by j.id`,
      [STAGGER_MS],
    );
    const scheduled = await ids(
      `select j.id::text from generate_series(1, 5) g
         cross join lateral job_queue.add_job('record', jsonb_build_object('scheduled', g), run_at => now() + interval '1 hour', priority => g) j`,
    );
    // failed for good by hand (the old permanently_fail_jobs): a task no worker runs
    const failedByHand = await ids(`select j.id::text from generate_series(1, 3) g cross join lateral job_queue.add_job('not-deployed', jsonb_build_object('g', g), max_attempts => 1) j`);
    assert.equal((await q('select * from job_queue.permanently_fail_jobs($1, $2)', [failedByHand, 'broken'])).length, 3);
    const keyedDue = await ids(`select id::text from job_queue.add_job('record', '{"keyed": "due"}', job_key => 'upgrade-due')`);
    const keyedLater = await ids(`select id::text from job_queue.add_job('record', '{"keyed": "later"}', job_key => 'upgrade-later', run_at => now() + interval '1 hour')`);
    await sql.query('commit');
    assert.equal(queued.length + staggered.length, 200);
    await waitForValue(sql, 'the old worker to fail its `fail` jobs for good', LEFTOVERS, failedByOld.length, [failedByOld]);
    const failedBefore = [...failedByOld, ...failedByHand];
    const scheduledBefore = await q(SNAPSHOT, [scheduled]);
    const failedRowsBefore = await q(SNAPSHOT, [failedBefore]);
    assert.deepEqual(
      failedRowsBefore.map((job) => [job.task_identifier, job.attempts, job.max_attempts, job.key, job.last_error]),
      [['fail', 1, 1, FAILED_KEY, FAIL_MESSAGE], ['fail', 1, 1, null, FAIL_MESSAGE], ...failedByHand.map(() => ['not-deployed', 1, 1, null, 'broken'])],
      'the old version left its jobs that failed for good in jobs',
    );

    for (const id of sleeps) await printed(old, `started sleep ${id}`);
    const [queuesBefore] = await q<{ locked: string[] }>(`select coalesce(array_agg(queue_name order by queue_name), $2) as locked from job_queue.job_queues where locked_by = $1`, [oldId, []]);
    assert.deepEqual(queuesBefore.locked.filter((name) => name !== 'q-c'), ['q-a', 'q-b'], 'the old worker holds the queues of its sleeps');

    // c. The new code starts beside it, and migrates at startup.
    const { logger, logs: newLogs } = warningsLogger();
    let newForbidden = ['old-only'];
    const bootStarted = Date.now();
    t = await createTestApp({
      url: db.url,
      providers: [NewTasks],
      logger,
      jobQueue: { pollInterval: 200, heartbeatInterval: NEW_HEARTBEAT_MS, forbiddenFlags: () => newForbidden },
    });
    const bootMs = Date.now() - bootStarted;
    const newId = t.worker.workerId;
    const ledger = await q<{ name: string; applied_at: Date }>('select name, applied_at from job_queue.migrations order by id');
    assert.deepEqual(ledger.map((row) => row.name), [...OLD_MIGRATIONS, NEW_MIGRATION, ...LATER_MIGRATIONS]);
    const migratedAt = ledger[2].applied_at;
    // the sleeps were still running when the migration was done
    const held = await q<{ id: string; locked_by: string }>('select id::text, locked_by from job_queue.jobs j where j.id = any($1::bigint[]) order by j.id', [sleeps]);
    assert.deepEqual(held, sleeps.map((id) => ({ id, locked_by: oldId })), `the old worker still ran its sleeps when the new app had migrated (boot took ${bootMs} ms; SLEEP_MS too short?)`);
    assert.deepEqual(
      (await q(`select count(*)::int as n from runs where payload->>'queue' in ('q-a', 'q-b')`))[0],
      { n: 0 },
      'nothing behind the sleeps in their queues ran yet',
    );
    assert.deepEqual(await jobQueueSchema(sql), {
      newColumns: ['cancel_reason', 'cancel_requested_at', 'errors', 'progress'],
      newTables: ['finished_counts', 'finished_jobs'],
      newFunctions: ['cancel_job', 'retry_jobs'],
      jobsIndexes: ['jobs_fetch_queued_idx', 'jobs_fetch_unqueued_idx', 'jobs_flow_idx', 'jobs_group_fetch_idx', 'jobs_key_idx', 'jobs_leftover_idx', 'jobs_locked_by_idx', 'jobs_pkey', 'jobs_queue_order_idx', 'jobs_retrying_idx', 'jobs_scheduled_idx', 'jobs_task_fetch_idx'],
      invalidIndexes: [],
    });
    assert.deepEqual(await q(SNAPSHOT, [scheduled]), scheduledBefore, 'the migration left the waiting jobs as they were');
    assert.deepEqual(await q(SNAPSHOT, [failedBefore]), failedRowsBefore, 'the migration left the failed jobs as they were');
    assert.equal(newLogs.length, 0, `the new app warned or erred while it migrated:\n${newLogs.join('\n')}`);

    // d. Both versions side by side. Jobs the old app adds after the migration, some only it
    // may run (flag old-only) and some in a queue; one it fails for good; some only the new
    // one may run; some anyone.
    const oldOnly = [
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after', n }, flags: ['old-only'] })))),
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after-many', n }, flags: ['old-only'] })), { many: true })),
    ];
    const failedDuring = await old.add([{ identifier: 'fail', payload: { n: 3 }, maxAttempts: 1 }]);
    // the old app replaces the keyed job scheduled for later (same id, due now, only for itself)
    const replaced = await old.add([{ identifier: 'record', payload: { keyed: 'later-replaced' }, jobKey: 'upgrade-later', flags: ['old-only'] }]);
    assert.deepEqual(replaced, keyedLater, 'add_job replaced the keyed job in place');
    const queuedByOld = await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { queue: 'q-c', seq: 21 + n }, queueName: 'q-c' })), { many: true });
    const queuedByNew = (await t.jobs.addMany(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { queue: 'q-c', seq: 31 + n }, queueName: 'q-c' })))).map((job) => job.id);
    const newOnly = (await t.jobs.addMany(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'new', n }, flags: ['new-only'] })))).map((job) => job.id);
    const anyoneAfter = await ids(`select j.id::text from generate_series(1, 20) g cross join lateral job_queue.add_job('record', jsonb_build_object('after', g)) j`);
    // The admin functions, from plain SQL, on the new schema: three of the scheduled jobs.
    const [rescheduled, completedByAdmin, failedByAdmin, ...waiting] = scheduled;
    const waitingBefore = scheduledBefore.slice(3);
    assert.deepEqual(await ids('select id::text from job_queue.reschedule_jobs($1::bigint[], run_at => now())', [[rescheduled]]), [rescheduled]);
    assert.deepEqual(await ids('select id::text from job_queue.complete_jobs($1::bigint[])', [[completedByAdmin]]), [completedByAdmin]);
    assert.deepEqual(await ids('select id::text from job_queue.permanently_fail_jobs($1::bigint[], $2)', [[failedByAdmin], 'given up']), [failedByAdmin]);
    assert.deepEqual(await finished([completedByAdmin, failedByAdmin], 'id::text, state, last_error'), [
      { id: completedByAdmin, state: 'completed', last_error: null },
      { id: failedByAdmin, state: 'failed', last_error: 'given up' },
    ]);
    const [removable] = await ids(`select id::text from job_queue.add_job('record', '{}', job_key => 'upgrade-remove', run_at => now() + interval '1 hour')`);
    assert.deepEqual(await ids(`select id::text from job_queue.remove_job('upgrade-remove')`), [removable]);
    assert.deepEqual(await q('select id from job_queue.jobs where id = any($1::bigint[])', [[completedByAdmin, failedByAdmin, removable]]), [], 'the admin calls took their jobs out of jobs');

    const failed = [...failedBefore, ...failedDuring];
    const mustRun = [
      ...addedByOldBefore, ...failedByOld, ...sleeps, ...queued, ...staggered, ...keyedDue, ...keyedLater,
      ...oldOnly, ...failedDuring, ...queuedByOld, ...queuedByNew, ...newOnly, ...anyoneAfter, rescheduled,
    ];
    await waitForValue(sql, 'every job but the waiting and failed ones to run and be released', 'select count(*)::int from job_queue.jobs where not (id = any($1::bigint[]))', 0, [[...waiting, ...failed]]);
    await waitForValue(sql, 'the old worker to fail its `fail` job added after the migration for good', LEFTOVERS, 1, [failedDuring]);
    for (const id of sleeps) await printed(old, `finished sleep ${id}`);
    // The old worker heartbeats every 5 s: one after the migration proves its statement works on the new schema.
    await waitFor('a heartbeat of the old worker after the migration', async () => {
      const [row] = await q<{ beat: boolean }>('select heartbeat_at > $2 as beat from job_queue.workers where id = $1', [oldId, migratedAt]);
      return row?.beat === true;
    }, 30_000);

    const { runs, byJob } = await runsByJob();
    assert.deepEqual([...byJob.keys()].sort(), [...mustRun].sort(), 'exactly the jobs that were due ran');
    assert.deepEqual(runs.filter((run) => byJob.get(run.job_id)!.length > 1), [], 'no job ran twice');
    assert.deepEqual(runs.filter((run) => run.attempt !== 1), [], 'every job ran at its first attempt');
    // the old worker finished its sleeps after the migration, and completed them on the new schema
    for (const id of sleeps) {
      const [run] = byJob.get(id)!;
      assert.equal(run.pid, old.pid);
      assert.ok(run.at > migratedAt, `sleep ${id} finished after the migration`);
    }
    assert.deepEqual([...oldOnly, ...failedDuring].filter((id) => byJob.get(id)![0].pid !== old.pid), [], 'the old worker ran the jobs only it may run, added after the migration by its own app');
    assert.deepEqual(byJob.get(keyedLater[0])!.map((run) => [run.pid, run.payload]), [[old.pid, { keyed: 'later-replaced' }]]);
    assert.deepEqual(newOnly.filter((id) => byJob.get(id)![0].pid !== process.pid), [], 'the new worker ran the jobs only it may run');
    // named queues: in order, whichever version ran each job
    for (const [queue, seqs] of [['q-a', range(0, 20)], ['q-b', range(0, 20)], ['q-c', range(1, 40)]] as const) {
      const ran = runs.filter((run) => run.payload?.queue === queue);
      assert.deepEqual(ran.map((run) => run.payload.seq), seqs, `queue ${queue} ran in order`);
    }
    const byOld = runs.filter((run) => run.pid === old.pid);
    const byNew = runs.filter((run) => run.pid === process.pid);
    ctx.diagnostic(
      `new app booted and migrated in ${bootMs} ms; the old worker ran ${byOld.length} jobs (${byOld.filter((run) => run.at > migratedAt).length} after the migration), ` +
        `the new one ${byNew.length}; queue jobs run by the new one: ${byNew.filter((run) => run.payload?.queue).length}`,
    );
    // the old worker is alive and well: its row kept, nothing failed or was retried but the jobs it was meant to fail
    assert.deepEqual(await q('select id from job_queue.workers where id = $1', [oldId]), [{ id: oldId }], 'the old worker was not declared dead');
    assert.deepEqual(failuresReported(old), [...failedByOld, ...failedDuring].map((id) => [id, 'fail', FAIL_MESSAGE]), 'the old worker reported the jobs it failed for good, and no other');
    assert.doesNotMatch(old.output, /failed, retrying|add failed|Error/, 'the old worker reported no error');
    assert.deepEqual(await q(SNAPSHOT, [waiting]), waitingBefore, 'the waiting jobs are unchanged');
    assert.deepEqual(
      await q('select started_at, first_run_at, progress, errors, cancel_requested_at, cancel_reason from job_queue.jobs where id = any($1::bigint[])', [waiting]),
      waiting.map(() => ({ started_at: null, first_run_at: null, progress: null, errors: null, cancel_requested_at: null, cancel_reason: null })),
    );
    // The old worker, the first to start, holds the maintenance lease while it runs: the rows
    // of jobs that failed for good wait in jobs until a worker of the new version leads.
    assert.deepEqual(await q('select holder from job_queue.leases where name = $1', ['maintenance']), [{ holder: oldId }], 'the old worker leads');
    const leftovers = await q(`select ${KEPT} from job_queue.jobs j where j.id = any($1::bigint[]) order by j.id`, [failed]);
    assert.equal(leftovers.length, failed.length);

    // e. The old worker is stopped (SIGTERM) while it runs a long job: it gives the job back
    // on the new schema, and the new worker runs it. The new worker takes over the lead.
    const [held2] = await ids(`select id::text from job_queue.add_job('sleep', '{"ms": 600000}', flags => '{old-only}')`);
    await printed(old, `started sleep ${held2}`);
    newForbidden = [];
    const exit = await old.terminate();
    assert.deepEqual(exit, { code: null, signal: 'SIGTERM' }, `the old worker shut down cleanly; its output:\n${old.output}`);
    assert.match(old.output, new RegExp(`Gave back 1 unfinished job\\(s\\): ${held2}\\b`));
    assert.doesNotMatch(old.output, /failed, retrying|Error/, 'its shutdown reported no error');
    assert.deepEqual(await q('select id from job_queue.workers where id = $1', [oldId]), [], 'the old worker left');
    await waitForValue(sql, 'the new worker to run the job given back', 'select count(*)::int from runs where job_id = $1 and pid = $2 and attempt = 1', 1, [held2, process.pid]);

    // The jobs that failed for good, before the upgrade and during it, are moved to
    // finished_jobs by the new leader, as they were; their key is free again.
    await waitForValue(sql, 'the new leader to move the jobs that failed for good to finished_jobs', `select count(*)::int from job_queue.finished_jobs where id = any($1::bigint[])`, failed.length, [failed]);
    assert.deepEqual(await finished(failed, `${KEPT}, state`), leftovers.map((job) => ({ ...job, state: 'failed' })), 'the failed jobs were kept as they were, failed');
    assert.deepEqual(await q('select id from job_queue.jobs where id = any($1::bigint[])', [failed]), [], 'the failed jobs left jobs');
    const [keyedFailed] = failedByOld;
    const [again] = await ids(`select id::text from job_queue.add_job('record', '{"keyed": "again"}', job_key => $1)`, [FAILED_KEY]);
    assert.notEqual(again, keyedFailed, 'add_job with the key of a job that failed for good adds a new job');
    assert.deepEqual(await finished([keyedFailed], 'id::text, state, key'), [{ id: keyedFailed, state: 'failed', key: FAILED_KEY }], 'the failed job stays failed');

    await waitForValue(sql, 'everything but the waiting jobs to be done', 'select count(*)::int from job_queue.jobs where not (id = any($1::bigint[]))', 0, [waiting]);
    assert.deepEqual(await q('select count(*)::int as n from job_queue.jobs where locked_by is not null or locked_at is not null'), [{ n: 0 }], 'no job is left locked');
    assert.deepEqual(await q('select queue_name from job_queue.job_queues where locked_by is not null or locked_at is not null'), [], 'no queue is left locked');
    assert.deepEqual(await q(SNAPSHOT, [waiting]), waitingBefore, 'the waiting jobs are still unchanged');
    const { byJob: byJobAtEnd } = await runsByJob();
    assert.deepEqual(byJobAtEnd.get(again)?.map((run) => [run.pid, run.payload]), [[process.pid, { keyed: 'again' }]], 'the new job under the freed key ran once');
    // Every job the new worker completed is kept in finished_jobs (the default retention: 24 h).
    const completedByNew = sortIds([...byJobAtEnd.values()].filter(([run]) => run.pid === process.pid).map(([run]) => run.job_id));
    assert.deepEqual(await finished(completedByNew), completedByNew.map((id) => ({ id, state: 'completed' })), 'the jobs the new worker completed are in finished_jobs');
    assert.deepEqual(await q('select id from job_queue.workers'), [{ id: newId }]);
    assert.equal(newLogs.length, 0, `the new app warned or erred:\n${newLogs.join('\n')}`);
  });

  /**
   * The same deploy, with an old replica (re)starting while the new code builds its index
   * concurrently (a transaction with a snapshot older than the build holds it up meanwhile,
   * as any long transaction of the app would): the old version finds both its migrations in
   * the ledger and takes no migration lock, so it boots and runs jobs during the build, and
   * the build then completes. (Against the version before, 0d7d0f2, whose runner waited for
   * the lock inside `pg_advisory_lock`, a statement the build waits for in turn, this was a
   * deadlock that PostgreSQL broke by failing one of the two: see STEP_ASIDE in ledger.ts.)
   */
  it('an old replica booting while the new code builds its index: both start, and the old ones run jobs meanwhile', async () => {
    // an empty database of its own
    const db = await createTestDatabase('upgrade_boot');
    const sql = await connect(db.url);
    const holder = await connect(db.url);
    let booting: Promise<TestApp | Error> | undefined;
    try {
      await createRunsTable(sql);
      await OldWorkerProcess.start(previous, db.url); // migrates the empty database, and runs on through the deploy
      assert.deepEqual(await migrationNames(sql), OLD_MIGRATIONS);
      // a transaction with a snapshot older than the build: it waits for it
      await holder.query('begin isolation level repeatable read');
      await holder.query('select txid_current()');
      booting = createTestApp({ url: db.url }).then(
        (app) => (t = app),
        (error: Error) => error,
      );
      const buildWaiting = async () =>
        (
          await sql.query(
            `select 1 from pg_stat_activity where datname = current_database() and query ilike 'create index concurrently%jobs_leftover_idx%'
              and wait_event_type = 'Lock' and wait_event = 'virtualxid'`,
          )
        ).rows.length > 0;
      await waitFor('the concurrent build of jobs_leftover_idx to wait for the old snapshot', buildWaiting);
      await OldWorkerProcess.start(previous, db.url);
      const [{ id }] = (await sql.query(`select id::text from job_queue.add_job('record', '{"during": "build"}')`)).rows;
      await waitForValue(sql, 'an old replica to run a job during the build', 'select count(*)::int from runs where job_id = $1', 1, [id]);
      assert.ok(await buildWaiting(), 'the build was still under way when the old replica had booted and a job had run');
      await holder.query('commit');

      const booted = await booting;
      assert.ok(!(booted instanceof Error), `the new app started: ${booted instanceof Error ? booted.message : ''}`);
      assert.deepEqual(await migrationNames(sql), [...OLD_MIGRATIONS, NEW_MIGRATION, ...LATER_MIGRATIONS]);
      assert.deepEqual((await jobQueueSchema(sql)).invalidIndexes, [], 'no index is left invalid');
    } finally {
      await holder.end();
      await booting; // settled before the cleanup closes what is still running
      await t?.close();
      t = undefined;
      await stopOldWorkers();
      await sql.end();
      await db.drop();
    }
  });
});

/** The parts of the job_queue schema the new migration adds or replaces, and any index left invalid. */
async function jobQueueSchema(sql: Client) {
  const [schema] = (
    await sql.query(`select
      array(select column_name::text from information_schema.columns where table_schema = 'job_queue' and table_name = 'jobs'
              and column_name in ('progress', 'errors', 'cancel_requested_at', 'cancel_reason') order by 1) as "newColumns",
      array(select tablename::text from pg_tables where schemaname = 'job_queue' and tablename in ('finished_jobs', 'finished_counts') order by 1) as "newTables",
      array(select proname::text from pg_proc where pronamespace = 'job_queue'::regnamespace and proname in ('cancel_job', 'retry_jobs') order by 1) as "newFunctions",
      array(select c.relname::text from pg_index i join pg_class c on c.oid = i.indexrelid
              where i.indrelid = 'job_queue.jobs'::regclass and i.indisvalid order by 1) as "jobsIndexes",
      array(select indexrelid::regclass::text from pg_index where not indisvalid order by 1) as "invalidIndexes"`)
  ).rows;
  return schema;
}

/** [id, task, error] of each job the old worker reported as failed for good, by id. */
function failuresReported(old: OldWorkerProcess): string[][] {
  return [...old.output.matchAll(FAILED_FOR_GOOD)].map((match) => match.slice(1, 4)).sort(([a], [b]) => Number(a) - Number(b));
}
