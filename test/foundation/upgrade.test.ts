import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Injectable, type LoggerService } from '@nestjs/common';
import type { Client } from 'pg';
import { DataSource } from 'typeorm';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { installPreviousVersion, OldWorkerProcess, PREVIOUS_VERSION, stopOldWorkers, type PreviousVersionApp } from '../support/previous-version';
import { waitFor, waitForValue } from '../support/wait';

const OLD_MIGRATION = 'CreateJobTables1763700000000';
const NEW_MIGRATION = 'RecoveryAndQueueOrder1763800000000';
/** How long the old worker's two `sleep` jobs run: they must outlast the new app's boot and migration. */
const SLEEP_MS = 4_000;
/** The unnamed `record` jobs added before the upgrade come due one by one over this long, so that both versions run them. */
const STAGGER_MS = 40;

/**
 * The new version's handlers, in the test process: `record` as the old app's (old-worker.js);
 * `sleep` records its run at once, without sleeping (it only ever runs the job the old
 * worker gives back at shutdown).
 */
@Injectable()
class NewTasks {
  constructor(private readonly dataSource: DataSource) {}

  @Task('record')
  async record(payload: unknown, ctx: JobContext) {
    await this.dataSource.query('insert into runs (job_id, pid, attempt, task, payload) values ($1, $2, $3, $4, $5)', [
      ctx.job.id,
      process.pid,
      ctx.job.attempts,
      ctx.job.taskIdentifier,
      JSON.stringify(payload ?? null),
    ]);
  }

  @Task('sleep')
  async sleep(payload: unknown, ctx: JobContext) {
    await this.record(payload, ctx);
  }
}

/** The columns of a job that nothing may change while it waits (the upgrade neither). */
const SNAPSHOT = `select id::text, task_identifier, payload, queue_name, priority, run_at, attempts, max_attempts, last_error, key,
  revision, flags, locked_at, locked_by, created_at, updated_at from job_queue.jobs where id = any($1::bigint[]) order by id`;

/**
 * A rolling deploy of the release that adds migration 2: the database holds every kind of
 * job, a worker of the previous version (the package as it was at commit 0d7d0f2, packed in
 * test/fixtures) is running some of them, and the new code starts beside it and migrates
 * (columns added, indexes built concurrently, one dropped). Both versions then run the
 * queue side by side until the old one is stopped with SIGTERM.
 */
describe('upgrading a populated database while workers of the previous version run', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let previous: PreviousVersionApp;
  let t: TestApp | undefined;

  before(async () => {
    db = await createTestDatabase('upgrade');
    sql = await connect(db.url);
    await sql.query(`create table runs (
      n bigint generated always as identity primary key,
      job_id bigint not null, pid int not null, attempt int not null, task text not null, payload jsonb,
      at timestamptz not null default clock_timestamp())`);
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

  it('the old worker keeps running and finishes its jobs, every job runs once, waiting and failed jobs are untouched, queues keep their order', async (ctx) => {
    // a. The previous version on an empty database: it applies the only migration it knows.
    const old = await OldWorkerProcess.start(previous, db.url);
    assert.ok(old.library?.path.startsWith(previous.dir), `the old app loaded the packed library, not the repository's: ${old.library?.path}`);
    assert.deepEqual(old.library?.migrations, [OLD_MIGRATION], `the library of ${PREVIOUS_VERSION} knows only the first migration`);
    assert.deepEqual(await q('select name from job_queue.migrations order by id'), [{ name: OLD_MIGRATION }]);
    const oldId = old.workerId!;

    // b. A populated database. The old app's own service adds jobs first (so that its
    // connections have add_job and the insert statements prepared before the schema changes).
    const addedByOldBefore = [
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before', n } })))),
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-before-many', n } })), { many: true })),
    ];
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
    // failed for good: a task no worker runs, then failed by hand
    const failedIds = await ids(`select j.id::text from generate_series(1, 3) g cross join lateral job_queue.add_job('not-deployed', jsonb_build_object('g', g), max_attempts => 1) j`);
    assert.equal((await q('select * from job_queue.permanently_fail_jobs($1, $2)', [failedIds, 'broken'])).length, 3);
    const keyedDue = await ids(`select id::text from job_queue.add_job('record', '{"keyed": "due"}', job_key => 'upgrade-due')`);
    const keyedLater = await ids(`select id::text from job_queue.add_job('record', '{"keyed": "later"}', job_key => 'upgrade-later', run_at => now() + interval '1 hour')`);
    await sql.query('commit');
    assert.equal(queued.length + staggered.length, 200);
    const waiting = [...scheduled, ...failedIds];
    const waitingBefore = await q(SNAPSHOT, [waiting]);
    assert.deepEqual(
      waitingBefore.filter((job) => failedIds.includes(job.id as string)).map((job) => [job.attempts, job.max_attempts, job.last_error]),
      failedIds.map(() => [1, 1, 'broken']),
    );

    for (const id of sleeps) await old.waitForOutput(`started sleep ${id}`, new RegExp(`^started sleep ${id}$`, 'm'));
    const [queuesBefore] = await q<{ locked: string[] }>(`select coalesce(array_agg(queue_name order by queue_name), $2) as locked from job_queue.job_queues where locked_by = $1`, [oldId, []]);
    assert.deepEqual(queuesBefore.locked.filter((name) => name !== 'q-c'), ['q-a', 'q-b'], 'the old worker holds the queues of its sleeps');

    // c. The new code starts beside it, and migrates at startup.
    const newLogs: string[] = [];
    const logger: LoggerService = {
      log: () => undefined,
      warn: (message: unknown, context?: unknown) => void newLogs.push(`warn [${context}] ${message}`),
      error: (message: unknown, ...rest: unknown[]) => void newLogs.push(`error ${message} ${rest.join(' ')}`),
    };
    let newForbidden = ['old-only'];
    const bootStarted = Date.now();
    t = await createTestApp({
      url: db.url,
      providers: [NewTasks],
      logger,
      jobQueue: { pollInterval: 200, forbiddenFlags: () => newForbidden },
    });
    const bootMs = Date.now() - bootStarted;
    const newId = t.worker.workerId;
    const ledger = await q<{ name: string; applied_at: Date }>('select name, applied_at from job_queue.migrations order by id');
    assert.deepEqual(ledger.map((row) => row.name), [OLD_MIGRATION, NEW_MIGRATION]);
    const migratedAt = ledger[1].applied_at;
    // the sleeps were still running when the migration was done
    const held = await q<{ id: string; locked_by: string }>('select id::text, locked_by from job_queue.jobs where id = any($1::bigint[]) order by id', [sleeps]);
    assert.deepEqual(held, sleeps.map((id) => ({ id, locked_by: oldId })), `the old worker still ran its sleeps when the new app had migrated (boot took ${bootMs} ms; SLEEP_MS too short?)`);
    assert.deepEqual(
      (await q(`select count(*)::int as n from runs where payload->>'queue' in ('q-a', 'q-b')`))[0],
      { n: 0 },
      'nothing behind the sleeps in their queues ran yet',
    );
    // the new schema is in place
    const columns = await q<{ c: string }>(
      `select table_name || '.' || column_name as c from information_schema.columns
        where table_schema = 'job_queue' and (table_name, column_name) in (('jobs', 'started_at'), ('jobs', 'first_run_at'), ('workers', 'timeout_ms')) order by 1`,
    );
    assert.deepEqual(columns.map((row) => row.c), ['jobs.first_run_at', 'jobs.started_at', 'workers.timeout_ms']);
    const indexes = await q<{ name: string; valid: boolean }>(
      `select c.relname as name, i.indisvalid as valid from pg_index i join pg_class c on c.oid = i.indexrelid
        join pg_class t on t.oid = i.indrelid join pg_namespace n on n.oid = t.relnamespace
        where n.nspname = 'job_queue' and t.relname = 'jobs' order by 1`,
    );
    assert.deepEqual(indexes, [
      { name: 'jobs_fetch_idx', valid: true },
      { name: 'jobs_key_idx', valid: true },
      { name: 'jobs_locked_by_idx', valid: true },
      { name: 'jobs_pkey', valid: true },
      { name: 'jobs_queue_order_idx', valid: true },
    ]);
    assert.equal(newLogs.length, 0, `the new app warned or erred while it migrated:\n${newLogs.join('\n')}`);

    // d. Both versions side by side. Jobs the old app adds after the migration, some only it
    // may run (flag old-only) and some in a queue; some only the new one may run; some anyone.
    const oldOnly = [
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after', n }, flags: ['old-only'] })))),
      ...(await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'old-after-many', n }, flags: ['old-only'] })), { many: true })),
    ];
    // the old app replaces the keyed job scheduled for later (same id, due now, only for itself)
    const replaced = await old.add([{ identifier: 'record', payload: { keyed: 'later-replaced' }, jobKey: 'upgrade-later', flags: ['old-only'] }]);
    assert.deepEqual(replaced, keyedLater, 'add_job replaced the keyed job in place');
    const queuedByOld = await old.add(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { queue: 'q-c', seq: 21 + n }, queueName: 'q-c' })), { many: true });
    const queuedByNew = (await t.jobs.addMany(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { queue: 'q-c', seq: 31 + n }, queueName: 'q-c' })))).map((job) => job.id);
    const newOnly = (await t.jobs.addMany(Array.from({ length: 10 }, (_, n) => ({ identifier: 'record', payload: { by: 'new', n }, flags: ['new-only'] })))).map((job) => job.id);
    const anyoneAfter = await ids(`select j.id::text from generate_series(1, 20) g cross join lateral job_queue.add_job('record', jsonb_build_object('after', g)) j`);

    const mustRun = [
      ...addedByOldBefore, ...sleeps, ...queued, ...staggered, ...keyedDue, ...keyedLater,
      ...oldOnly, ...queuedByOld, ...queuedByNew, ...newOnly, ...anyoneAfter,
    ];
    await waitForValue(sql, 'every job but the waiting and failed ones to run and be completed', 'select count(*)::int from job_queue.jobs where not (id = any($1::bigint[]))', 0, [waiting]);
    for (const id of sleeps) await old.waitForOutput(`finished sleep ${id}`, new RegExp(`^finished sleep ${id}$`, 'm'));
    // The old worker heartbeats every 10 s: one after the migration proves its statement works on the new schema.
    await waitFor('a heartbeat of the old worker after the migration', async () => {
      const [row] = await q<{ beat: boolean }>('select heartbeat_at > $2 as beat from job_queue.workers where id = $1', [oldId, migratedAt]);
      return row?.beat === true;
    }, 30_000);

    const runs = await q<{ job_id: string; pid: number; attempt: number; task: string; payload: Record<string, unknown>; at: Date }>(
      'select job_id::text, pid, attempt, task, payload, at from runs order by n',
    );
    const runsOf = new Map<string, typeof runs>();
    for (const run of runs) runsOf.set(run.job_id, [...(runsOf.get(run.job_id) ?? []), run]);
    assert.deepEqual([...runsOf.keys()].sort(), [...mustRun].sort(), 'exactly the jobs that were due ran');
    assert.deepEqual(runs.filter((run) => runsOf.get(run.job_id)!.length > 1), [], 'no job ran twice');
    assert.deepEqual(runs.filter((run) => run.attempt !== 1), [], 'every job ran at its first attempt');
    // the old worker finished its sleeps after the migration, and completed them on the new schema
    for (const id of sleeps) {
      const [run] = runsOf.get(id)!;
      assert.equal(run.pid, old.pid);
      assert.ok(run.at > migratedAt, `sleep ${id} finished after the migration`);
    }
    assert.deepEqual(oldOnly.filter((id) => runsOf.get(id)![0].pid !== old.pid), [], 'the old worker ran the jobs only it may run, added after the migration by its own app');
    assert.deepEqual(runsOf.get(keyedLater[0])!.map((run) => [run.pid, run.payload]), [[old.pid, { keyed: 'later-replaced' }]]);
    assert.deepEqual(newOnly.filter((id) => runsOf.get(id)![0].pid !== process.pid), [], 'the new worker ran the jobs only it may run');
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
    // the old worker is alive and well: its row kept (the default timeout), nothing failed or was retried
    assert.deepEqual(await q('select timeout_ms from job_queue.workers where id = $1', [oldId]), [{ timeout_ms: 30_000 }], 'the old worker was not declared dead');
    assert.doesNotMatch(old.output, /failed, retrying|add failed|Error/, 'the old worker reported no error');
    assert.deepEqual(await q(SNAPSHOT, [waiting]), waitingBefore, 'the waiting and failed jobs are unchanged');
    assert.deepEqual(await q('select started_at, first_run_at from job_queue.jobs where id = any($1::bigint[])', [waiting]), waiting.map(() => ({ started_at: null, first_run_at: null })));

    // e. The old worker is stopped (SIGTERM) while it runs a long job: it gives the job back
    // on the new schema, and the new worker runs it.
    const [held2] = await ids(`select id::text from job_queue.add_job('sleep', '{"ms": 600000}', flags => '{old-only}')`);
    await old.waitForOutput(`started sleep ${held2}`, new RegExp(`^started sleep ${held2}$`, 'm'));
    newForbidden = [];
    const exit = await old.terminate();
    assert.deepEqual(exit, { code: null, signal: 'SIGTERM' }, `the old worker shut down cleanly; its output:\n${old.output}`);
    assert.match(old.output, new RegExp(`Gave back 1 unfinished job\\(s\\): ${held2}\\b`));
    assert.doesNotMatch(old.output, /failed, retrying|Error/, 'its shutdown reported no error');
    assert.deepEqual(await q('select id from job_queue.workers where id = $1', [oldId]), [], 'the old worker left');

    await waitForValue(sql, 'the new worker to run the job given back', 'select count(*)::int from runs where job_id = $1 and pid = $2 and attempt = 1', 1, [held2, process.pid]);
    await waitForValue(sql, 'everything but the waiting and failed jobs to be done', 'select count(*)::int from job_queue.jobs where not (id = any($1::bigint[]))', 0, [waiting]);
    assert.deepEqual(await q('select count(*)::int as n from job_queue.jobs where locked_by is not null or locked_at is not null'), [{ n: 0 }], 'no job is left locked');
    assert.deepEqual(await q('select queue_name from job_queue.job_queues where locked_by is not null or locked_at is not null'), [], 'no queue is left locked');
    assert.deepEqual(await q(SNAPSHOT, [waiting]), waitingBefore, 'the waiting and failed jobs are still unchanged');
    assert.deepEqual(await q('select id from job_queue.workers'), [{ id: newId }]);
    assert.equal(newLogs.length, 0, `the new app warned or erred:\n${newLogs.join('\n')}`);
  });

  it('an old replica booting while the new code builds its indexes: neither fails to start', async () => {
    // an empty database of its own
    const db = await createTestDatabase('upgrade_boot');
    const sql = await connect(db.url);
    await OldWorkerProcess.start(previous, db.url); // migrates the empty database, and runs on through the deploy
    assert.deepEqual((await sql.query('select name from job_queue.migrations')).rows, [{ name: OLD_MIGRATION }]);
    // a transaction with a snapshot older than the builds: each waits for it
    const holder = await connect(db.url);
    let second: Promise<OldWorkerProcess | Error> | undefined;
    try {
      await holder.query('begin isolation level repeatable read');
      await holder.query('select txid_current()');
      const booting = createTestApp({ url: db.url }).then(
        (app) => (t = app),
        (error: Error) => error,
      );
      const waiting = async (what: string, where: string) =>
        waitFor(what, async () => (await sql.query(`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and ${where}`)).rows.length > 0);
      await waiting('the first concurrent build to wait for the old snapshot', `query ilike 'create index concurrently%' and wait_event = 'virtualxid'`);
      second = OldWorkerProcess.start(previous, db.url).then(
        (worker) => worker,
        (error: Error) => error,
      );
      await waiting("the old replica's migration runner to wait for the lock", `query ilike '%pg_advisory_lock(%' and wait_event = 'advisory'`);
      // Past the old runner's deadlock check (made once, deadlock_timeout after it began to
      // wait): a fixed wait, as the check leaves no trace to wait for.
      const [{ ms }] = (await sql.query(`select setting::int as ms from pg_settings where name = 'deadlock_timeout'`)).rows;
      await new Promise((resolve) => setTimeout(resolve, ms + 500));
      await holder.query('commit');

      const booted = await booting;
      assert.ok(!(booted instanceof Error), `the new app started: ${booted instanceof Error ? booted.message : ''}`);
      const old = await second;
      assert.ok(!(old instanceof Error), `the old replica started: ${old instanceof Error ? old.message : ''}`);
      assert.deepEqual((await sql.query('select name from job_queue.migrations order by id')).rows, [{ name: OLD_MIGRATION }, { name: NEW_MIGRATION }]);
      assert.deepEqual((await sql.query(`select indexrelid::regclass::text as name from pg_index where not indisvalid`)).rows, [], 'no index is left invalid');
    } finally {
      await holder.end();
      await second; // settled before the cleanup kills what is still running
      await t?.close();
      t = undefined;
      await stopOldWorkers();
      await sql.end();
      await db.drop();
    }
  });
});

/**
 * The same deploy, with an old replica (re)starting while the new code builds its indexes
 * concurrently: the old version's migration runner waits for the migration lock inside
 * `pg_advisory_lock`, a statement with a snapshot, which `create index concurrently` waits
 * for in turn, while the new runner holds that lock. PostgreSQL breaks the cycle by failing
 * whichever of the two checks for deadlocks first: the old replica (it exits, and starts
 * again), or, when the build came to wait on the old runner more than `deadlock_timeout`
 * after that runner began to wait (here: a transaction with an older snapshot holds the
 * build up meanwhile, as any long transaction of the app would), the new migration, and the
 * new app does not start ("deadlock detected", an invalid jobs_queue_order_idx left behind).
 * TODO until the new runner survives it (it steps aside only on lock_timeout, 55P03, not on
 * a deadlock, 40P01; see libs/job-queue/src/migrate/ledger.ts applyOutsideTransaction).
 */
function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
