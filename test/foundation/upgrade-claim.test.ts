import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createTestApp, type TestApp } from '../support/app';
import { OldWorkerProcess, OPERATIONS_VERSION } from '../support/previous-version';
import { assertEachRanOnce, migrationNames, migrationsAfter, NewTasks, printed, queuesHeadedBySleeps, range, type Run, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor, waitForValue } from '../support/wait';

const OLD_MIGRATIONS = ['CreateJobTables1763700000000', 'RecoveryAndQueueOrder1763800000000', 'JobLifecycle1763900000000', 'Operations1764000000000'];
const NEW_MIGRATION = 'ClaimByQueueHeads1764100000000';
/** Migrations after it, which the new code runs too. */
const LATER_MIGRATIONS = migrationsAfter(NEW_MIGRATION);
/** The old worker's `sleep` jobs heading two queues: they outlast the new app's boot and migration. */
const SLEEP_MS = 4_000;
const STAGGER_MS = 30;

/**
 * A rolling deploy of the release whose claim finds queue heads apart from unqueued jobs
 * (migration 5 builds jobs_fetch_unqueued_idx and jobs_fetch_queued_idx concurrently and drops
 * jobs_fetch_idx, which the previous version's claim walks) while a worker of the previous
 * release (f2489f6, migrations 1–4) runs: it holds two queues across the migration, jobs come
 * due during it, and both versions claim side by side after it, the old one without its index.
 */
describe('upgrading to migration 5 while workers of the previous version run', () => {
  const u = upgradeSetup('upgrade_claim', OPERATIONS_VERSION);
  const { q, ids } = u;
  let t: TestApp | undefined;

  const jobsIndexes = async () =>
    (await q<{ name: string }>(`select indexname as name from pg_indexes where schemaname = 'job_queue' and tablename = 'jobs' order by 1`)).map((r) => r.name);

  it('every job runs once, queues keep their order, and the old worker claims on without the index it was planned with', async (ctx) => {
    // a. The previous version on an empty database: its four migrations, its claim on jobs_fetch_idx.
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    assert.deepEqual(old.library?.migrations, OLD_MIGRATIONS, `the library of ${OPERATIONS_VERSION} knows four migrations`);
    assert.deepEqual(await migrationNames(u.sql), OLD_MIGRATIONS);
    assert.ok((await jobsIndexes()).includes('jobs_fetch_idx'));
    const warmUp = await old.add(Array.from({ length: 20 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before', n } })));
    await waitForValue(u.sql, 'the old worker to run its first jobs (its claim prepared on the old indexes)', `select count(*)::int from runs where job_id = any($1::bigint[])`, 20, [warmUp]);

    // b. In flight across the migration: two queues headed by sleeps the old worker holds, with
    // jobs behind them; jobs coming due during it, in and out of a queue; and jobs for later.
    const { sleeps, queued } = await queuesHeadedBySleeps(u, SLEEP_MS);
    const staggered = await ids(
      `select j.id::text from generate_series(1, 120) g
         cross join lateral job_queue.add_job('record', jsonb_build_object('staggered', g, 'queue', case when g % 3 = 0 then 'q-c' end, 'seq', g),
           queue_name => case when g % 3 = 0 then 'q-c' end, run_at => now() + g * $1 * interval '1 millisecond') j
       order by j.id`,
      [STAGGER_MS],
    );
    const waiting = await ids(`select j.id::text from generate_series(1, 3) g cross join lateral job_queue.add_job('record', jsonb_build_object('later', g), run_at => now() + interval '1 hour') j`);
    for (const id of sleeps) await printed(old, `started sleep ${id}`);

    // c. The new code starts beside it and migrates.
    const { logger, logs: newLogs } = warningsLogger();
    t = u.app = await createTestApp({ url: u.db.url, providers: [NewTasks], logger, jobQueue: { pollInterval: 200, concurrency: 4 } });
    const [migrated] = await q<{ at: Date }>('select applied_at as at from job_queue.migrations where name = $1', [NEW_MIGRATION]);
    assert.deepEqual(await migrationNames(u.sql), [...OLD_MIGRATIONS, NEW_MIGRATION, ...LATER_MIGRATIONS]);
    assert.deepEqual(
      await q('select id::text, locked_by from job_queue.jobs where id = any($1::bigint[]) order by id', [sleeps]),
      sleeps.map((id) => ({ id, locked_by: old.workerId })),
      `the old worker still ran its sleeps when the migration was done (SLEEP_MS too short?)`,
    );
    assert.deepEqual(await jobsIndexes(), ['jobs_fetch_queued_idx', 'jobs_fetch_unqueued_idx', 'jobs_flow_idx', 'jobs_group_fetch_idx', 'jobs_key_idx', 'jobs_leftover_idx', 'jobs_locked_by_idx', 'jobs_pkey', 'jobs_queue_order_idx', 'jobs_retrying_idx', 'jobs_scheduled_idx', 'jobs_task_fetch_idx']);
    assert.deepEqual(await q(`select indexrelid::regclass::text as index from pg_index where not indisvalid`), [], 'no index left invalid');
    assert.deepEqual(newLogs, [], 'the new app neither warned nor erred while it migrated');

    // d. Side by side: the old app adds through its prepared statements and claims with its own
    // (planned again without jobs_fetch_idx); the new app adds and claims too.
    const addedAfter = [
      ...(await old.add(Array.from({ length: 30 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after', n } })))),
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after-queued', queue: 'q-d', seq: n }, queueName: 'q-d' })), { many: true })),
      ...(await t.jobs.addMany(Array.from({ length: 30 }, (_, n) => ({ identifier: 'record', payload: { by: 'new', n } })))).map((job) => job.id),
      ...(await t.jobs.addMany(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'new-queued', queue: 'q-e', seq: n }, queueName: 'q-e' })))).map((job) => job.id),
    ];
    const mustRun = [...warmUp, ...sleeps, ...queued, ...staggered, ...addedAfter];
    await waitForValue(u.sql, 'every due job to run and be released', `select count(*)::int from job_queue.jobs where not (id = any($1::bigint[]))`, 0, [waiting]);
    for (const id of sleeps) await printed(old, `finished sleep ${id}`);

    const runs = await q<Run>(`select job_id::text, pid, attempt, task, payload, at from runs order by n`);
    const byJob = assertEachRanOnce(runs, mustRun);
    const inOrder = (queue: string) => runs.filter((run) => run.payload?.queue === queue).map((run) => run.payload.seq as number);
    assert.deepEqual(inOrder('q-c'), [...inOrder('q-c')].sort((a, b) => a - b), 'queue q-c, coming due during the migration, ran in order');
    assert.equal(inOrder('q-c').length, 40);
    for (const queue of ['q-d', 'q-e']) assert.deepEqual(inOrder(queue), range(0, 9), `queue ${queue}, added after the migration, ran in order`);
    for (const id of sleeps) assert.ok(byJob.get(id)![0].pid === old.pid && byJob.get(id)![0].at > migrated.at, `the old worker finished sleep ${id} after the migration`);
    const after = runs.filter((run) => run.at > migrated.at);
    const unqueuedBy = (pid: number) => after.filter((run) => run.pid === pid && run.task === 'record' && run.payload?.queue == null).length;
    assert.ok(unqueuedBy(old.pid) > 0 && unqueuedBy(process.pid) > 0, `both versions claimed unqueued jobs after the migration: old ${unqueuedBy(old.pid)}, new ${unqueuedBy(process.pid)}`);
    assert.doesNotMatch(old.output, /failed, retrying|add failed|Error/, 'the old worker reported no error');
    assert.deepEqual(newLogs, [], 'the new app neither warned nor erred');
    assert.equal((await q('select 1 from job_queue.jobs where id = any($1::bigint[]) and locked_by is null and attempts = 0', [waiting])).length, 3, 'the waiting jobs wait');

    // e. The old worker stops (SIGTERM) and the new one alone drains what comes next.
    assert.deepEqual(await old.terminate(), { code: null, signal: 'SIGTERM' });
    const last = (await t.jobs.addMany(Array.from({ length: 20 }, (_, n) => ({ identifier: 'record', payload: { by: 'new-alone', queue: n % 2 ? 'q-f' : null, seq: n }, queueName: n % 2 ? 'q-f' : undefined })))).map((job) => job.id);
    await waitFor('the new worker to run the jobs added after the old one stopped', async () => (await q('select 1 from runs where job_id = any($1::bigint[])', [last])).length === 20);
    ctx.diagnostic(`after the migration: ${after.filter((run) => run.pid === old.pid).length} jobs run by the old worker, ${after.filter((run) => run.pid === process.pid).length} by the new one`);
  });
});
