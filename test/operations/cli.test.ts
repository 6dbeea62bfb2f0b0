import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { migrationLockKey } from '../../migrations';
import { createJobQueueMigrations } from '../../libs/job-queue/src';
import { closeTestApp, createTestApp, openTestApp, type TestAppContext } from '../support/app';
import { assertOneLineError, cli, cliIntoClosedPipe, printed } from '../support/cli-process';
import { connect, createTestDatabase } from '../support/database';
import { countingTask } from '../support/tasks';
import { waitFor, waitForValue } from '../support/wait';

const MIGRATIONS = createJobQueueMigrations().map((Migration) => new Migration().name as string);

const ledger = async (sql: Client) => (await sql.query('select name, count(*)::int as n from job_queue.migrations group by name order by name')).rows;

describe('the admin CLI (bin nestjs-job-queue)', () => {
  describe('migrate and validate', () => {
    let db: Awaited<ReturnType<typeof createTestDatabase>>;
    let sql: Client;
    before(async () => {
      db = await createTestDatabase('cli_migrate');
      sql = await connect(db.url);
    });
    after(async () => {
      await sql.end();
      await db.drop();
    });

    it('validate fails on an empty database, migrate --dry-run changes nothing, migrate applies every migration, then validate passes', async () => {
      const empty = await cli(db.url, 'validate');
      assertOneLineError(empty, 1, 'JQ_SCHEMA_OUTDATED');
      for (const name of MIGRATIONS) assert.match(empty.stdout, new RegExp(`pending migration: ${name}`), printed(empty));

      const dryRun = await cli(db.url, 'migrate', '--dry-run', '--show-sql');
      assert.equal(dryRun.code, 0, printed(dryRun));
      assert.match(dryRun.stdout, /create table "job_queue"\.jobs \(/, 'the SQL it would run');
      assert.match(dryRun.stdout, /create index concurrently if not exists "jobs_fetch_queued_idx"/, 'as the module runs it: indexes concurrently');
      const dryJson = await cli(db.url, 'migrate', '--dry-run', '--json');
      assert.deepEqual(JSON.parse(dryJson.stdout).pending.map((m: { name: string }) => m.name), MIGRATIONS);
      const { rows: schemas } = await sql.query(`select 1 from pg_namespace where nspname = 'job_queue'`);
      assert.equal(schemas.length, 0, '--dry-run created nothing');

      const migrate = await cli(db.url, 'migrate', '--json');
      assert.equal(migrate.code, 0, printed(migrate));
      assert.deepEqual(
        JSON.parse(migrate.stdout).outcomes.map((o: { name: string; outcome: string }) => [o.name, o.outcome]),
        MIGRATIONS.map((name) => [name, 'applied']),
      );
      assert.deepEqual(await ledger(sql), [...MIGRATIONS].sort().map((name) => ({ name, n: 1 })));

      const current = await cli(db.url, 'validate');
      assert.equal(current.code, 0, printed(current));
      assert.equal(current.stderr, '');
      const currentJson = await cli(db.url, 'validate', '--json');
      assert.equal(currentJson.code, 0, printed(currentJson));
      assert.deepEqual(
        (({ current, pending, objectsCompared, differences }) => ({ current, pending, objectsCompared, differences }))(JSON.parse(currentJson.stdout)),
        { current: true, pending: [], objectsCompared: true, differences: [] },
      );
      const again = await cli(db.url, 'migrate');
      assert.equal(again.code, 0, printed(again));
      assert.match(again.stdout, /no migration pending/);
    });

    it('validate names what differs from what the migrations make, even when the ledger says applied', async () => {
      await sql.query('alter table job_queue.jobs drop column progress');
      await sql.query('drop function job_queue.cancel_job(bigint, text)');
      await sql.query('drop table job_queue.event_listeners');
      // what a concurrent index build that failed halfway leaves
      await sql.query(`update pg_index set indisvalid = false where indexrelid = 'job_queue.jobs_fetch_queued_idx'::regclass`);
      const run = await cli(db.url, 'validate');
      assertOneLineError(run, 1, 'JQ_SCHEMA_OUTDATED');
      for (const line of [
        'missing column: jobs.progress (jsonb)',
        'missing function: cancel_job(job_id bigint, reason text)',
        'missing table: event_listeners',
        'invalid index: jobs_fetch_queued_idx',
      ]) {
        assert.ok(run.stdout.includes(line), `"${line}" in\n${printed(run)}`);
      }
      const json = JSON.parse((await cli(db.url, 'validate', '--json')).stdout);
      assert.equal(json.current, false);
      assert.deepEqual(
        json.differences.map((d: { kind: string; name: string; problem: string }) => `${d.problem} ${d.kind} ${d.name}`).sort(),
        ['invalid index jobs_fetch_queued_idx', 'missing column jobs.progress', 'missing function cancel_job(job_id bigint, reason text)', 'missing table event_listeners'],
        'the columns and indexes of the missing table are not listed apart',
      );
      const { rows: scratch } = await sql.query(`select nspname from pg_namespace where nspname like 'jq_validate_%'`);
      assert.deepEqual(scratch, [], 'the scratch schema validate replays the migrations into is gone');
    });
  });

  it('migrate while an app runs the migrations at the same moment: all succeed, the ledger has each migration once', async () => {
    const db = await createTestDatabase('cli_migrate_race');
    const sql = await connect(db.url);
    const gate = await connect(db.url);
    try {
      // Holds the migration lock, so that two migrate processes and an app all find every
      // migration pending and wait for it; released once all three wait, they race for each migration.
      await gate.query('select pg_advisory_lock(hashtext($1))', [migrationLockKey('job_queue')]);
      const runs = [cli(db.url, 'migrate', '--json'), cli(db.url, 'migrate', '--json')];
      const app = createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: '*' } });
      const waiting = `select count(*)::int from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() and query like '%pg_try_advisory_lock(%'`;
      await waitForValue(sql, 'both migrate processes and the app to wait for the migration lock', waiting, 3);
      await gate.query('select pg_advisory_unlock(hashtext($1))', [migrationLockKey('job_queue')]);
      const [first, second] = await Promise.all(runs);
      const t = await app;
      try {
        const outcomes = [first, second].map((run) => {
          assert.equal(run.code, 0, printed(run));
          return new Map((JSON.parse(run.stdout).outcomes as Array<{ name: string; outcome: string }>).map((o) => [o.name, o.outcome]));
        });
        for (const name of MIGRATIONS) {
          const said = outcomes.map((byName) => byName.get(name));
          assert.ok(said.every((o) => o === 'applied' || o === 'applied-by-another-runner'), `${name}: each migrate process says what became of it: ${said}`);
          assert.ok(said.filter((o) => o === 'applied').length <= 1, `${name}: applied by one runner at most: ${said}`);
        }
        assert.deepEqual(await ledger(sql), [...MIGRATIONS].sort().map((name) => ({ name, n: 1 })));
        assert.ok(await t.jobs.add('after_race'), 'the app works on the schema');
        assert.equal((await cli(db.url, 'validate')).code, 0);
      } finally {
        await t.close();
      }
    } finally {
      await gate.end();
      await sql.end();
      await db.drop();
    }
  });

  describe('status and jobs', () => {
    const { provider: MyTasks } = countingTask('mine');
    let ctx: TestAppContext;
    before(async () => {
      // a worker that runs `mine` only: jobs of `theirs` wait, for the test to look at
      ctx = await openTestApp('cli_jobs', { providers: [MyTasks], jobQueue: { externalTasks: ['theirs'] } });
    });
    after(() => closeTestApp(ctx));

    const row = async (id: string) => {
      const active = (await ctx.sql.query(`select 'jobs' as "table", attempts, cancel_requested_at, last_error from job_queue.jobs where id = $1`, [id])).rows[0];
      const finished = (await ctx.sql.query(`select 'finished_jobs' as "table", state, last_error from job_queue.finished_jobs where id = $1`, [id])).rows[0];
      return active ?? finished;
    };

    it('status shows a queued job by state and task, the oldest due job, the worker with its heartbeat, and the maintenance leader', async () => {
      const job = await ctx.t.jobs.add('theirs', { n: 1 });
      await waitFor('the worker to take the maintenance lease', async () => (await ctx.sql.query(`select 1 from job_queue.leases where name = 'maintenance'`)).rows.length > 0);
      const { rows: workers } = await ctx.sql.query('select id from job_queue.workers');

      const run = await cli(ctx.db.url, 'status', '--json');
      assert.equal(run.code, 0, printed(run));
      const status = JSON.parse(run.stdout);
      assert.equal(status.jobs.byState.waiting, 1);
      assert.equal(status.jobs.byTask.theirs.waiting, 1);
      assert.equal(status.due.count, 1);
      assert.equal(status.due.oldest.id, job.id);
      assert.equal(status.due.oldest.task, 'theirs');
      assert.deepEqual(status.workers.map((w: { id: string }) => w.id), workers.map((w) => w.id));
      assert.equal(typeof status.workers[0].heartbeatAgeSeconds, 'number');
      assert.equal(status.workers[0].overdue, false);
      assert.equal(status.maintenanceLeader.holder, workers[0].id);
      assert.equal(status.maintenanceLeader.live, true);
      assert.deepEqual(status.pendingMigrations, []);

      const text = await cli(ctx.db.url, 'status');
      assert.equal(text.code, 0, printed(text));
      assert.match(text.stdout, /^theirs +0 +1 /m, 'a row for the task: 0 blocked, 1 waiting');
      assert.match(text.stdout, new RegExp(`Oldest due job: ${job.id} \\(theirs\\)`));
      assert.match(text.stdout, new RegExp(`Maintenance leader: ${workers[0].id}`));
      await ctx.t.jobs.deleteJob(job.id);
    });

    it('jobs list and show read what JobQueueService reads', async () => {
      const [a, b] = await ctx.t.jobs.addMany([
        { identifier: 'theirs', payload: { n: 'a' } },
        { identifier: 'theirs', payload: { n: 'b' }, queueName: 'q' },
      ]);
      const list = await cli(ctx.db.url, 'jobs', 'list', '--task', 'theirs', '--state', 'waiting', '--json');
      assert.equal(list.code, 0, printed(list));
      const service = await ctx.t.jobs.listJobs({ task: 'theirs', state: 'waiting' });
      assert.deepEqual(JSON.parse(list.stdout).jobs, JSON.parse(JSON.stringify(service.jobs)), 'the same jobs, in the same order, in the same shape');
      assert.deepEqual(service.jobs.map((j) => j.id), [b.id, a.id]);
      assert.deepEqual(JSON.parse((await cli(ctx.db.url, 'jobs', 'list', '--queue', 'q', '--limit', '1', '--json')).stdout).jobs.map((j: { id: string }) => j.id), [b.id]);
      const table = await cli(ctx.db.url, 'jobs', 'list', '--task', 'theirs');
      assert.match(table.stdout, new RegExp(`^ *${b.id} +waiting +theirs +q `, 'm'), printed(table));

      const show = await cli(ctx.db.url, 'jobs', 'show', a.id, '--json');
      assert.equal(show.code, 0, printed(show));
      assert.deepEqual(JSON.parse(show.stdout), JSON.parse(JSON.stringify(await ctx.t.jobs.getJob(a.id))));
      assertOneLineError(await cli(ctx.db.url, 'jobs', 'show', '999999'), 5, 'JQ_JOB_NOT_FOUND');
      assertOneLineError(await cli(ctx.db.url, 'jobs', 'show', 'x1'), 3, 'JQ_INVALID_JOB_ID');
      assertOneLineError(await cli(ctx.db.url, 'jobs', 'list', '--state', 'nope'), 3, 'JQ_BAD_USAGE');
      for (const job of [a, b]) await ctx.t.jobs.deleteJob(job.id);
    });

    it('jobs cancel, retry and retry-failed do what they say, and say which ids they refused', async () => {
      const [waiting, held, failed1, failed2, other] = await ctx.t.jobs.addMany(
        ['waiting', 'held', 'f1', 'f2', 'other'].map((n) => ({ identifier: 'theirs', payload: { n } })),
      );
      // held: as if a worker ran it (this test plays the worker)
      await ctx.sql.query(`update job_queue.jobs set locked_at = now(), locked_by = 'w-test', started_at = now() where id = $1`, [held.id]);

      const cancel = await cli(ctx.db.url, 'jobs', 'cancel', waiting.id, held.id, '--reason', 'not needed', '--json');
      assert.equal(cancel.code, 0, printed(cancel));
      assert.deepEqual(JSON.parse(cancel.stdout).cancelled.map((c: { id: string; outcome: string }) => [c.id, c.outcome]), [
        [waiting.id, 'cancelled'],
        [held.id, 'requested'],
      ]);
      assert.deepEqual(await row(waiting.id), { table: 'finished_jobs', state: 'cancelled', last_error: 'JQ_JOB_CANCELLED: not needed' });
      const heldRow = await row(held.id);
      assert.equal(heldRow.table, 'jobs');
      assert.ok(heldRow.cancel_requested_at instanceof Date, 'the cancel is recorded for its worker');

      // a finished job, and one that does not exist: refused, one line each, exit 5
      const refused = await cli(ctx.db.url, 'jobs', 'cancel', waiting.id, '999999');
      assert.equal(refused.code, 5, printed(refused));
      assert.deepEqual(refused.stderr.trimEnd().split('\n').map((line) => line.split(':')[0]), ['JQ_JOB_FINISHED', 'JQ_JOB_NOT_FOUND']);

      const retry = await cli(ctx.db.url, 'jobs', 'retry', waiting.id);
      assert.equal(retry.code, 0, printed(retry));
      assert.equal((await row(waiting.id)).table, 'jobs', 'the cancelled job is back in the queue');
      assert.equal((await row(waiting.id)).attempts, 0);
      const notRetried = await cli(ctx.db.url, 'jobs', 'retry', other.id, '--json');
      assert.equal(notRetried.code, 5, printed(notRetried));
      assert.deepEqual(JSON.parse(notRetried.stdout).refused.map((r: { code: string }) => r.code), ['JQ_INVALID_STATE']);
      assertOneLineError(notRetried, 5, 'JQ_INVALID_STATE');

      await ctx.t.jobs.permanentlyFailJobs([failed1.id, failed2.id], 'broken');
      const retryFailed = await cli(ctx.db.url, 'jobs', 'retry-failed', '--task', 'theirs', '--json');
      assert.equal(retryFailed.code, 0, printed(retryFailed));
      assert.deepEqual(JSON.parse(retryFailed.stdout), { task: 'theirs', retried: 2 });
      for (const id of [failed1.id, failed2.id]) assert.deepEqual(await row(id), { table: 'jobs', attempts: 0, cancel_requested_at: null, last_error: 'broken' });
    });
  });

  describe('connection problems and bad input: one line, its own code and exit code', () => {
    let empty: Awaited<ReturnType<typeof createTestDatabase>>;
    before(async () => (empty = await createTestDatabase('cli_errors')));
    after(() => empty.drop());

    it('an unreachable database (a closed port) exits 2 with JQ_DB_UNREACHABLE', async () => {
      const server = createServer();
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { port } = server.address() as { port: number };
      await new Promise((resolve) => server.close(resolve));
      const run = await cli(undefined, 'status', '--database-url', `postgres://postgres:secret@127.0.0.1:${port}/postgres`);
      assertOneLineError(run, 2, 'JQ_DB_UNREACHABLE');
      assert.equal(run.stdout, '');
      assert.doesNotMatch(run.stderr, /secret/, 'the password is not printed');
    });

    it('a bad URL, a missing schema, an unknown database and a bad schema name each have their own code', async () => {
      assertOneLineError(await cli('mysql://localhost/x', 'status'), 3, 'JQ_BAD_DATABASE_URL');
      assertOneLineError(await cli('not a url', 'status'), 3, 'JQ_BAD_DATABASE_URL');
      assertOneLineError(await cli(undefined, 'status'), 3, 'JQ_BAD_DATABASE_URL');
      assertOneLineError(await cli(empty.url, 'status'), 4, 'JQ_SCHEMA_MISSING');
      assertOneLineError(await cli(empty.url, 'jobs', 'list'), 4, 'JQ_SCHEMA_MISSING');
      const unknownDatabase = new URL(empty.url);
      unknownDatabase.pathname = `/${empty.name}_missing`;
      assertOneLineError(await cli(unknownDatabase.href, 'status'), 2, 'JQ_DB_LOGIN_FAILED');
      assertOneLineError(await cli(empty.url, 'status', '--schema', 'no-such schema'), 3, 'JQ_INVALID_SCHEMA');
      assertOneLineError(await cli(empty.url, 'frobnicate'), 3, 'JQ_BAD_USAGE');
    });
  });

  it('output into a pipe its reader closed (| head) ends the command quietly, exit 0, no stack trace', async () => {
    for (const args of [['export-sql'], ['--help']]) {
      const run = await cliIntoClosedPipe(...args);
      assert.deepEqual(run, { code: 0, stderr: '' }, args.join(' '));
    }
  });

  it('export-sql prints SQL that, run on an empty database, gives a schema validate accepts and the module finds migrated', async () => {
    const run = await cli(undefined, 'export-sql');
    assert.equal(run.code, 0, printed(run));
    assert.doesNotMatch(run.stdout, /pg_try_advisory|\$1/, 'no lock, no parameter left');
    const db = await createTestDatabase('cli_export');
    const sql = await connect(db.url);
    try {
      await sql.query(`begin; ${run.stdout} commit;`);
      assert.deepEqual(await ledger(sql), [...MIGRATIONS].sort().map((name) => ({ name, n: 1 })));
      const validate = await cli(db.url, 'validate');
      assert.equal(validate.code, 0, printed(validate));
      const app = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: '*' } });
      await app.close();
      assert.deepEqual(await ledger(sql), [...MIGRATIONS].sort().map((name) => ({ name, n: 1 })), 'the module applied nothing again');
    } finally {
      await sql.end();
      await db.drop();
    }
  });
});
