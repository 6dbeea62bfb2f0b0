import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { installPreviousVersion, LIFECYCLE_VERSION, OldWorkerProcess, stopOldWorkers, type PreviousVersionApp } from '../support/previous-version';
import { createRunsTable, migrationNames, NewTasks, printed, range, warningsLogger, type Run } from '../support/upgrade';
import { waitFor, waitForValue } from '../support/wait';

const OLD_MIGRATIONS = ['CreateJobTables1763700000000', 'RecoveryAndQueueOrder1763800000000', 'JobLifecycle1763900000000'];
const NEW_MIGRATION = 'Operations1764000000000';
/** The old worker's `sleep` jobs heading two queues: they outlast the new app's boot and migration. */
const SLEEP_MS = 4_000;
const STAGGER_MS = 30;
const NEW_CONCURRENCY = 6;

/** The columns of a waiting job that nothing may change (the migration neither). */
const SNAPSHOT = `select id::text, task_identifier, payload, queue_name, priority, run_at, attempts, max_attempts, last_error, key,
  revision, flags, locked_at, locked_by, created_at, updated_at, errors, progress from job_queue.jobs j where j.id = any($1::bigint[]) order by j.id`;

/**
 * A rolling deploy of the release that adds migration 4 (workers' host and pid, schedules'
 * expressions, jobs' trace context, an index on finished_jobs built concurrently) while
 * workers of the previous release (38ce51d, with migrations 1–3) run: the old worker holds
 * two queues across the migration, adds jobs through its own prepared statements before and
 * after it, an old replica starts after it, and both versions run the queue side by side
 * until the old ones are stopped.
 */
describe('upgrading to migration 4 while workers of the previous version run', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let previous: PreviousVersionApp;
  let t: TestApp | undefined;

  before(async () => {
    db = await createTestDatabase('upgrade_ops');
    sql = await connect(db.url);
    await createRunsTable(sql);
    previous = installPreviousVersion(LIFECYCLE_VERSION);
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

  it('every job runs once, queues keep their order, the old workers work on the new schema, and the new one records what the dashboard shows', async () => {
    // a. The previous version on an empty database: its three migrations.
    const old = await OldWorkerProcess.start(previous, db.url);
    assert.deepEqual(old.library?.migrations, OLD_MIGRATIONS, `the library of ${LIFECYCLE_VERSION} knows three migrations`);
    assert.deepEqual(await migrationNames(sql), OLD_MIGRATIONS);

    // b. A populated database: jobs added by the old app's own service first (its statements
    // prepared before the schema changes), one it fails for good, two queues headed by sleeps
    // it holds across the migration, jobs coming due during it, and jobs for later.
    const addedByOld = [
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before', n } })))),
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before-many', n } })), { many: true })),
    ];
    const [failedByOld] = await old.add([{ identifier: 'fail', payload: { n: 1 }, maxAttempts: 1, jobKey: 'upgrade-4-failed' }]);
    const sleeps: string[] = [];
    const queued: string[] = [];
    for (const queue of ['q-a', 'q-b']) {
      sleeps.push(...(await ids(`select id::text from job_queue.add_job('sleep', $1, queue_name => $2)`, [{ ms: SLEEP_MS, queue, seq: 0 }, queue])));
      for (let seq = 1; seq <= 15; seq++) queued.push(...(await ids(`select id::text from job_queue.add_job('record', $1, queue_name => $2)`, [{ queue, seq }, queue])));
    }
    const staggered = await ids(
      `select j.id::text from generate_series(1, 120) g
         cross join lateral job_queue.add_job('record', jsonb_build_object('staggered', g), run_at => now() + g * $1 * interval '1 millisecond') j
       order by j.id`,
      [STAGGER_MS],
    );
    const waiting = await ids(`select j.id::text from generate_series(1, 3) g cross join lateral job_queue.add_job('record', jsonb_build_object('later', g), run_at => now() + interval '1 hour') j`);
    const waitingBefore = await q(SNAPSHOT, [waiting]);
    await waitForValue(sql, 'the old worker to fail its job for good', `select count(*)::int from job_queue.finished_jobs where id = $1 and state = 'failed'`, 1, [failedByOld]);
    for (const id of sleeps) await printed(old, `started sleep ${id}`);

    // c. The new code starts beside it and migrates.
    const { logger, logs: newLogs } = warningsLogger();
    t = await createTestApp({ url: db.url, providers: [NewTasks], logger, jobQueue: { pollInterval: 200, concurrency: NEW_CONCURRENCY } });
    const [migrated] = await q<{ at: Date }>('select applied_at as at from job_queue.migrations where name = $1', [NEW_MIGRATION]);
    assert.deepEqual(await migrationNames(sql), [...OLD_MIGRATIONS, NEW_MIGRATION]);
    assert.deepEqual(await q('select id::text, locked_by from job_queue.jobs where id = any($1::bigint[]) order by id', [sleeps]), sleeps.map((id) => ({ id, locked_by: old.workerId })), 'the old worker still ran its sleeps when the migration was done');
    const [schema] = await q(`select
      array(select table_name || '.' || column_name from information_schema.columns where table_schema = 'job_queue'
              and (table_name, column_name) in (('workers', 'hostname'), ('workers', 'pid'), ('workers', 'concurrency'), ('jobs', 'trace_id'), ('jobs', 'span_id'), ('jobs', 'trace_flags'),
                ('known_crontabs', 'task_identifier'), ('known_crontabs', 'expression'), ('known_crontabs', 'time_zone'), ('known_crontabs', 'registered_at'))
            order by 1) as columns,
      exists (select 1 from pg_proc where pronamespace = 'job_queue'::regnamespace and proname = 'add_job_traced') as traced,
      array(select indexrelid::regclass::text from pg_index where not indisvalid) as invalid,
      exists (select 1 from pg_indexes where schemaname = 'job_queue' and indexname = 'finished_jobs_key_idx') as key_index`);
    assert.deepEqual(schema, {
      columns: ['jobs.span_id', 'jobs.trace_flags', 'jobs.trace_id', 'known_crontabs.expression', 'known_crontabs.registered_at', 'known_crontabs.task_identifier', 'known_crontabs.time_zone', 'workers.concurrency', 'workers.hostname', 'workers.pid'],
      traced: true,
      invalid: [],
      key_index: true,
    });
    assert.deepEqual(newLogs, [], 'the new app neither warned nor erred while it migrated');

    // d. Side by side: the old app adds through its prepared statements on the changed row
    // type of jobs, the new one adds too, and an old replica starts after the migration.
    const addedAfter = [
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after', n } })))),
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after-many', n } })), { many: true })),
      ...(await old.add([{ identifier: 'record', payload: { by: 'old-after-keyed' }, jobKey: 'upgrade-4-failed' }])),
      ...(await t.jobs.addMany(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'new', n } })))).map((job) => job.id),
    ];
    const replica = await OldWorkerProcess.start(previous, db.url);
    const byReplica = await replica.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'replica', n } })), { many: true });

    const mustRun = [...addedByOld, failedByOld, ...sleeps, ...queued, ...staggered, ...addedAfter, ...byReplica];
    await waitForValue(sql, 'every due job to run and be released', 'select count(*)::int from job_queue.jobs where not (id = any($1::bigint[]))', 0, [waiting]);
    for (const id of sleeps) await printed(old, `finished sleep ${id}`);
    await waitFor('a heartbeat of each old worker after the migration', async () => {
      const rows = await q<{ beat: boolean }>('select heartbeat_at > $2 as beat from job_queue.workers where id = any($1::text[])', [[old.workerId, replica.workerId], migrated.at]);
      return rows.length === 2 && rows.every((row) => row.beat);
    }, 30_000);

    const runs = await q<Run>('select job_id::text, pid, attempt, task, payload, at from runs order by n');
    const byJob = new Map<string, Run[]>();
    for (const run of runs) byJob.set(run.job_id, [...(byJob.get(run.job_id) ?? []), run]);
    assert.deepEqual([...byJob.keys()].sort(), [...mustRun].sort(), 'exactly the due jobs ran');
    assert.deepEqual(runs.filter((run) => byJob.get(run.job_id)!.length > 1), [], 'no job ran twice');
    for (const queue of ['q-a', 'q-b']) {
      assert.deepEqual(runs.filter((run) => run.payload?.queue === queue).map((run) => run.payload.seq), range(0, 15), `queue ${queue} ran in order`);
    }
    for (const id of sleeps) assert.ok(byJob.get(id)![0].pid === old.pid && byJob.get(id)![0].at > migrated.at, `the old worker finished sleep ${id} after the migration`);
    const pids = new Set(runs.filter((run) => run.at > migrated.at).map((run) => run.pid));
    assert.ok(pids.has(old.pid) && pids.has(process.pid), 'both versions ran jobs after the migration');
    assert.deepEqual(await q(SNAPSHOT, [waiting]), waitingBefore, 'the waiting jobs are unchanged');
    for (const worker of [old, replica]) assert.doesNotMatch(worker.output, /failed, retrying|add failed|Error/, `the old worker ${worker.pid} reported no error`);

    // What the dashboard shows of the workers: host and pid for the new one, nothing (not an error) for the old ones.
    const workers = await q<{ id: string; hostname: string | null; pid: number | null; concurrency: number | null }>('select id, hostname, pid, concurrency from job_queue.workers order by started_at');
    assert.deepEqual(workers, [
      { id: old.workerId, hostname: null, pid: null, concurrency: null },
      { id: t.worker.workerId, hostname: hostname(), pid: process.pid, concurrency: NEW_CONCURRENCY },
      { id: replica.workerId, hostname: null, pid: null, concurrency: null },
    ]);

    // e. The old workers stop (SIGTERM), one while it runs a long job: given back on the new schema, run by the new worker.
    await t.close();
    t = undefined;
    const [long] = await ids(`select id::text from job_queue.add_job('sleep', '{"ms": 600000}')`);
    const started = new RegExp(`^started sleep ${long}$`, 'm');
    await waitFor('an old worker to start the long sleep', () => started.test(old.output) || started.test(replica.output));
    const holder = started.test(old.output) ? old : replica;
    assert.deepEqual(await replica.terminate(), { code: null, signal: 'SIGTERM' });
    assert.deepEqual(await old.terminate(), { code: null, signal: 'SIGTERM' });
    assert.match(holder.output, new RegExp(`Gave back 1 unfinished job\\(s\\): ${long}\\b`));
    t = await createTestApp({ url: db.url, providers: [NewTasks], logger, jobQueue: { pollInterval: 200 } });
    await waitForValue(sql, 'the new worker to run the job given back', 'select count(*)::int from runs where job_id = $1 and pid = $2 and attempt = 1', 1, [long, process.pid]);
    assert.deepEqual(newLogs, [], 'the new app neither warned nor erred');
  });
});
