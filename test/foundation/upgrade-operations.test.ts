import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { LIFECYCLE_VERSION, OldWorkerProcess } from '../support/previous-version';
import { assertEachRanOnce, migrationNames, migrationsAfter, NewTasks, printed, queuesHeadedBySleeps, type Run, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor, waitForValue } from '../support/wait';

const OLD_MIGRATIONS = ['CreateJobTables1763700000000', 'RecoveryAndQueueOrder1763800000000', 'JobLifecycle1763900000000'];
const NEW_MIGRATION = 'Operations1764000000000';
/** Migrations after it, which the new code runs too. */
const LATER_MIGRATIONS = migrationsAfter(NEW_MIGRATION);
/** The old worker's `sleep` jobs heading two queues: they outlast the new app's boot and migration. */
const SLEEP_MS = 4_000;
const STAGGER_MS = 30;
const NEW_CONCURRENCY = 6;
/** The schedule both versions declare, as a rolling deploy keeps it: `tick` every second, in UTC (old-worker.js: OLD_WORKER_CRON). */
const TICK_EVERY_SECOND = '* * * * * *';
/** The first old worker leaves the jobs flagged `replica-only` to the old replica that starts after the migration (the new app too). */
const OLD_ENV = { OLD_WORKER_CRON: TICK_EVERY_SECOND, OLD_WORKER_FORBIDDEN_FLAGS: 'new-only,replica-only' };
const REPLICA_ENV = { OLD_WORKER_CRON: TICK_EVERY_SECOND };
const NEW_FORBIDDEN = ['replica-only'];

/** The new version's side of the schedule: the same task, expression and time zone. */
@Injectable()
class NewSchedule {
  constructor(private readonly tasks: NewTasks) {}

  @Task('tick')
  @Cron(TICK_EVERY_SECOND, { timeZone: 'UTC' })
  async tick(payload: unknown, ctx: JobContext) {
    await this.tasks.record(payload, ctx);
  }
}

/** The columns of a waiting job that nothing may change (the migration neither). */
const SNAPSHOT = `select id::text, task_identifier, payload, queue_name, priority, run_at, attempts, max_attempts, last_error, key,
  revision, flags, locked_at, locked_by, created_at, updated_at, errors, progress from job_queue.jobs j where j.id = any($1::bigint[]) order by j.id`;

/**
 * A rolling deploy of the release that adds migration 4 (workers' host and pid, schedules'
 * expressions, jobs' trace context, an index on finished_jobs built concurrently) while
 * workers of the previous release (38ce51d, with migrations 1–3) run: the old worker holds
 * two queues across the migration, adds jobs through its own prepared statements before and
 * after it, fails jobs for good on either side of it, ticks a cron schedule the new version
 * declares too, an old replica starts after it, and both versions run the queue side by side
 * until the old ones are stopped.
 */
describe('upgrading to migration 4 while workers of the previous version run', () => {
  const u = upgradeSetup('upgrade_ops', LIFECYCLE_VERSION);
  const { q, ids } = u;
  let t: TestApp | undefined;

  /** The schedule's row in known_crontabs. */
  const tickSchedule = () =>
    q<{ identifier: string; known_since: Date; ticked: boolean; task_identifier: string | null; expression: string | null; time_zone: string | null; registered_at: Date | null }>(
      'select identifier, known_since, last_execution is not null as ticked, task_identifier, expression, time_zone, registered_at from job_queue.known_crontabs',
    );
  /** The tick of each `tick` job that ran (its `_cron.ts`), with the process that ran it, in the order they ran. */
  const tickRuns = async () => q<{ ts: string; pid: number }>(`select payload->'_cron'->>'ts' as ts, pid from runs where task = 'tick' order by n`);

  it('every job runs once, queues keep their order, the old workers work on the new schema, and the new one records what the dashboard shows', async (ctx) => {
    // a. The previous version on an empty database: its three migrations.
    const old = await OldWorkerProcess.start(u.previous, u.db.url, OLD_ENV);
    assert.deepEqual(old.library?.migrations, OLD_MIGRATIONS, `the library of ${LIFECYCLE_VERSION} knows three migrations`);
    assert.deepEqual(await migrationNames(u.sql), OLD_MIGRATIONS);
    await waitFor('the old scheduler to add a tick, and the old worker to run it', async () => (await tickRuns()).length > 0);
    // its known_crontabs has no more columns than these
    const [scheduleBefore] = await q<{ identifier: string; known_since: Date; ticked: boolean }>('select identifier, known_since, last_execution is not null as ticked from job_queue.known_crontabs');
    assert.deepEqual({ ...scheduleBefore, known_since: undefined }, { identifier: 'tick', known_since: undefined, ticked: true });

    // b. A populated database: jobs added by the old app's own service first (its statements
    // prepared before the schema changes), one it fails for good, two queues headed by sleeps
    // it holds across the migration, jobs coming due during it, and jobs for later.
    const addedByOld = [
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before', n } })))),
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before-many', n } })), { many: true })),
    ];
    const [failedByOld] = await old.add([{ identifier: 'fail', payload: { n: 1 }, maxAttempts: 1, jobKey: 'upgrade-4-failed' }]);
    const { sleeps, queued } = await queuesHeadedBySleeps(u, SLEEP_MS);
    const staggered = await ids(
      `select j.id::text from generate_series(1, 120) g
         cross join lateral job_queue.add_job('record', jsonb_build_object('staggered', g), run_at => now() + g * $1 * interval '1 millisecond') j
       order by j.id`,
      [STAGGER_MS],
    );
    const waiting = await ids(`select j.id::text from generate_series(1, 3) g cross join lateral job_queue.add_job('record', jsonb_build_object('later', g), run_at => now() + interval '1 hour') j`);
    const waitingBefore = await q(SNAPSHOT, [waiting]);
    await waitForValue(u.sql, 'the old worker to fail its job for good', `select count(*)::int from job_queue.finished_jobs where id = $1 and state = 'failed'`, 1, [failedByOld]);
    for (const id of sleeps) await printed(old, `started sleep ${id}`);

    // c. The new code starts beside it and migrates.
    const { logger, logs: newLogs } = warningsLogger();
    t = u.app = await createTestApp({ url: u.db.url, providers: [NewTasks, NewSchedule], logger, jobQueue: { pollInterval: 200, concurrency: NEW_CONCURRENCY, forbiddenFlags: NEW_FORBIDDEN } });
    const [migrated] = await q<{ at: Date }>('select applied_at as at from job_queue.migrations where name = $1', [NEW_MIGRATION]);
    assert.deepEqual(await migrationNames(u.sql), [...OLD_MIGRATIONS, NEW_MIGRATION, ...LATER_MIGRATIONS]);
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
    // The new scheduler declared the schedule on the row the old one made: known_since kept (backfill reaches no earlier).
    const [schedule] = await tickSchedule();
    assert.ok(schedule.registered_at instanceof Date && schedule.registered_at >= migrated.at, `the new app registered the schedule after the migration: ${String(schedule.registered_at)}`);
    assert.deepEqual(schedule, { ...scheduleBefore, task_identifier: 'tick', expression: TICK_EVERY_SECOND, time_zone: 'UTC', registered_at: schedule.registered_at });

    // d. Side by side: the old app adds through its prepared statements on the changed row
    // type of jobs, the new one adds too, and an old replica starts after the migration.
    const addedAfter = [
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after', n } })))),
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after-many', n } })), { many: true })),
      ...(await old.add([{ identifier: 'record', payload: { by: 'old-after-keyed' }, jobKey: 'upgrade-4-failed' }])),
      ...(await t.jobs.addMany(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'new', n } })))).map((job) => job.id),
    ];
    // Jobs only the old workers run (`fail`), failed for good on the new schema: one the old app
    // adds, one added by add_job_traced() with a trace context, as the new app adds with telemetry.
    const failedAfter = await old.add([{ identifier: 'fail', payload: { n: 2 }, maxAttempts: 1 }]);
    const traced = await q<{ id: string; trace_id: string; span_id: string; trace_flags: number }>(
      `select id::text, trace_id::text, span_id::text, trace_flags from job_queue.add_job_traced('fail', '{"n": 3}', null, null, 1, null, null, null, null, $1, $2, $3)`,
      ['4bf92f35-77b3-4da6-a3ce-929d0e0e4736', '-6862057420329457999', 1],
    );
    assert.deepEqual(traced.map(({ id, ...trace }) => trace), [{ trace_id: '4bf92f35-77b3-4da6-a3ce-929d0e0e4736', span_id: '-6862057420329457999', trace_flags: 1 }], 'add_job_traced returns the job with its trace context');
    failedAfter.push(traced[0].id);
    const replica = await OldWorkerProcess.start(u.previous, u.db.url, REPLICA_ENV);
    const byReplica = await replica.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'replica', n }, flags: ['replica-only'] })), { many: true });
    assert.deepEqual(await tickSchedule(), [schedule], 'an old replica starting leaves the schedule as the new app declared it');

    const failed = [failedByOld, ...failedAfter];
    const mustRun = [...addedByOld, ...sleeps, ...queued, ...staggered, ...addedAfter, ...byReplica, ...failed];
    await waitForValue(u.sql, 'every due job to run and be released', `select count(*)::int from job_queue.jobs where not (id = any($1::bigint[])) and task_identifier <> 'tick'`, 0, [waiting]);
    for (const id of sleeps) await printed(old, `finished sleep ${id}`);
    await waitFor('a heartbeat of each old worker after the migration', async () => {
      const rows = await q<{ beat: boolean }>('select heartbeat_at > $2 as beat from job_queue.workers where id = any($1::text[])', [[old.workerId, replica.workerId], migrated.at]);
      return rows.length === 2 && rows.every((row) => row.beat);
    }, 30_000);

    const runs = await q<Run>(`select job_id::text, pid, attempt, task, payload, at from runs where task <> 'tick' order by n`);
    const byJob = assertEachRanOnce(runs, mustRun);
    for (const id of sleeps) assert.ok(byJob.get(id)![0].pid === old.pid && byJob.get(id)![0].at > migrated.at, `the old worker finished sleep ${id} after the migration`);
    assert.deepEqual(byReplica.filter((id) => byJob.get(id)![0].pid !== replica.pid), [], 'the old replica started after the migration ran the jobs only it may run');
    const pids = new Set(runs.filter((run) => run.at > migrated.at).map((run) => run.pid));
    assert.ok(pids.has(old.pid) && pids.has(process.pid), 'both versions ran jobs after the migration');
    assert.deepEqual(await q(SNAPSHOT, [waiting]), waitingBefore, 'the waiting jobs are unchanged');
    assert.deepEqual(
      await q(`select id::text, state, attempts, last_error from job_queue.finished_jobs f where f.id = any($1::bigint[]) order by f.id`, [failed]),
      failed.map((id) => ({ id, state: 'failed', attempts: 1, last_error: 'failed on purpose' })),
      'the jobs the old worker failed for good, before and after the migration, are in finished_jobs',
    );
    for (const worker of [old, replica]) assert.doesNotMatch(worker.output, /failed, retrying|add failed|Error/, `the old worker ${worker.pid} reported no error`);

    // What the dashboard shows of the workers: host and pid for the new one, nothing (not an error) for the old ones.
    const workers = await q<{ id: string; hostname: string | null; pid: number | null; concurrency: number | null }>('select id, hostname, pid, concurrency from job_queue.workers order by started_at');
    assert.deepEqual(workers, [
      { id: old.workerId, hostname: null, pid: null, concurrency: null },
      { id: t.worker.workerId, hostname: hostname(), pid: process.pid, concurrency: NEW_CONCURRENCY },
      { id: replica.workerId, hostname: null, pid: null, concurrency: null },
    ]);

    // e. The new app stops first: the old schedulers tick on alone, on the new schema. Then the
    // old workers stop (SIGTERM), one while it runs a long job: given back, run by the new worker.
    await t.close();
    t = u.app = undefined;
    const [{ closed }] = await q<{ closed: Date }>('select now() as closed');
    await waitFor('an old scheduler to add a tick after the new app closed, and an old worker to run it', async () => (await tickRuns()).some((run) => Date.parse(run.ts) > closed.getTime()));
    const [long] = await ids(`select id::text from job_queue.add_job('sleep', '{"ms": 600000}')`);
    const started = new RegExp(`^started sleep ${long}$`, 'm');
    await waitFor('an old worker to start the long sleep', () => started.test(old.output) || started.test(replica.output));
    const holder = started.test(old.output) ? old : replica;
    assert.deepEqual(await replica.terminate(), { code: null, signal: 'SIGTERM' });
    assert.deepEqual(await old.terminate(), { code: null, signal: 'SIGTERM' });
    assert.match(holder.output, new RegExp(`Gave back 1 unfinished job\\(s\\): ${long}\\b`));
    t = u.app = await createTestApp({ url: u.db.url, providers: [NewTasks, NewSchedule], logger, jobQueue: { pollInterval: 200 } });
    await waitForValue(u.sql, 'the new worker to run the job given back', 'select count(*)::int from runs where job_id = $1 and pid = $2 and attempt = 1', 1, [long, process.pid]);
    assert.deepEqual(newLogs, [], 'the new app neither warned nor erred');
    // Each tick became one job, whichever version's scheduler claimed it, before, during and after the migration.
    const ticks = (await tickRuns()).map((run) => run.ts);
    assert.deepEqual(ticks.filter((ts, i) => ticks.indexOf(ts) !== i), [], `no tick ran twice (of ${ticks.length})`);
    const ranBy = (pid: number) => runs.filter((run) => run.pid === pid && run.at > migrated.at).length;
    ctx.diagnostic(
      `after the migration: ${ranBy(old.pid)} jobs run by the old worker, ${ranBy(replica.pid)} by the replica, ${ranBy(process.pid)} by the new one; ${ticks.length} ticks in all`,
    );
  });
});
