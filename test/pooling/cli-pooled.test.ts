import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Client } from 'pg';
import { createJobQueueMigrations } from '../../libs/job-queue/src';
import { createTestApp, type TestApp, type TestDatabase } from '../support/app';
import { assertOneLineError, cli, cliWithEnv, printed } from '../support/cli-process';
import { connect, createTestDatabase } from '../support/database';
import { skipWithoutPgBouncer, usePgBouncer } from '../support/pgbouncer';

const MIGRATIONS = createJobQueueMigrations().map((Migration) => new Migration().name as string);

/** What a server connection may keep from a client that used it: settings, named prepared statements. */
const LEFT_ON_SESSION = `select pg_backend_pid() as pid, current_setting('lock_timeout') as lock_timeout, current_setting('statement_timeout') as statement_timeout,
  (select count(*)::int from pg_prepared_statements) as prepared`;

/** Every server connection of a PgBouncer whose pool holds two: two clients, each in an open transaction, hold both. */
async function serverSessions(url: string): Promise<Array<Record<string, unknown>>> {
  const clients = [new Client({ connectionString: url }), new Client({ connectionString: url })];
  try {
    const rows: Array<Record<string, unknown>> = [];
    for (const client of clients) {
      client.on('error', () => undefined);
      await client.connect();
      await client.query('begin');
      rows.push((await client.query(LEFT_ON_SESSION)).rows[0]);
    }
    assert.notEqual(rows[0].pid, rows[1].pid, 'the two server connections');
    return rows;
  } finally {
    for (const client of clients) await client.end().catch(() => undefined);
  }
}

/** Advisory locks anyone holds in the database, read directly (a session lock left on a server connection of the pooler shows here). */
const advisoryLocks = async (sql: Client) =>
  (await sql.query(`select count(*)::int as n from pg_locks where locktype = 'advisory' and database = (select oid from pg_database where datname = current_database())`)).rows[0].n;

const ledger = async (sql: Client) => (await sql.query('select name, count(*)::int as n from job_queue.migrations group by name order by name')).rows;

/**
 * The bin through PgBouncer 1.18 in transaction mode, whose pool holds two server connections
 * (so that whatever one client leaves on a server connection, the next one meets): without
 * `--transaction-pooling`, migrate refuses as the module does (JQ_TRANSACTION_POOLER, nothing
 * written); with it, every command works and leaves nothing on the server connections.
 */
describe('the admin CLI through PgBouncer in transaction mode', { skip: skipWithoutPgBouncer() }, () => {
  const pgbouncer = usePgBouncer({ defaultPoolSize: 2 });
  let db: TestDatabase;
  let sql: Client;
  let pooled: string;
  let app: TestApp | undefined;

  before(async () => {
    db = await createTestDatabase('cli_pooled');
    sql = await connect(db.url);
    pooled = pgbouncer.get().through(db.url);
  });
  after(async () => {
    await app?.close();
    await pgbouncer.stop();
    await sql.end();
    await db.drop();
  });

  it('without --transaction-pooling, migrate refuses (JQ_TRANSACTION_POOLER, one line, saying to pass the flag) and writes nothing', async () => {
    for (const args of [['migrate'], ['migrate', '--dry-run']]) {
      const run = await cli(pooled, ...args);
      assertOneLineError(run, 3, 'JQ_TRANSACTION_POOLER');
      assert.match(run.stderr, /go through a pooler in transaction mode/);
      assert.match(run.stderr, /Pass --transaction-pooling/);
      assert.equal(run.stdout, '');
    }
    const { rows } = await sql.query(`select 1 from pg_namespace where nspname = 'job_queue'`);
    assert.deepEqual(rows, [], 'no schema made');
    assert.equal(await advisoryLocks(sql), 0);
  });

  it('with it, two migrate processes at once apply each migration once, in one transaction each, indexes built plainly; nothing is left on the server connections', async () => {
    const dryRun = await cli(pooled, '--transaction-pooling', 'migrate', '--dry-run', '--json');
    assert.equal(dryRun.code, 0, printed(dryRun));
    const planned = JSON.parse(dryRun.stdout).pending as Array<{ name: string; outsideTransaction: boolean }>;
    assert.deepEqual(planned.map((m) => [m.name, m.outsideTransaction]), MIGRATIONS.map((name) => [name, false]), 'each in one transaction');
    const shown = await cli(pooled, 'migrate', '--dry-run', '--show-sql', '--transaction-pooling');
    assert.doesNotMatch(shown.stdout, /concurrently/, printed(shown));

    const runs = await Promise.all([cli(pooled, '--transaction-pooling', 'migrate', '--json'), cli(pooled, 'migrate', '--transaction-pooling', '--json')]);
    const outcomes = runs.map((run) => {
      assert.equal(run.code, 0, printed(run));
      return new Map((JSON.parse(run.stdout).outcomes as Array<{ name: string; outcome: string }>).map((o) => [o.name, o.outcome]));
    });
    for (const name of MIGRATIONS) {
      const said = outcomes.map((byName) => byName.get(name) ?? 'found applied');
      assert.equal(said.filter((o) => o === 'applied').length, 1, `${name}: applied by one of them: ${said}`);
    }
    assert.deepEqual(await ledger(sql), [...MIGRATIONS].sort().map((name) => ({ name, n: 1 })));
    assert.equal(await advisoryLocks(sql), 0, 'no session advisory lock stays on a server connection');
    const invalid = await sql.query(`select c.relname from pg_index i join pg_class c on c.oid = i.indexrelid join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'job_queue' and not i.indisvalid`);
    assert.deepEqual(invalid.rows, []);
    const { rows: [defaults] } = await sql.query(LEFT_ON_SESSION);
    for (const { pid, ...session } of await serverSessions(pooled)) {
      assert.deepEqual(session, { lock_timeout: defaults.lock_timeout, statement_timeout: defaults.statement_timeout, prepared: 0 }, `server connection ${pid}`);
    }

    const again = await cliWithEnv({ JOB_QUEUE_TRANSACTION_POOLING: '1' }, pooled, 'migrate');
    assert.equal(again.code, 0, printed(again));
    assert.match(again.stdout, /no migration pending/, 'JOB_QUEUE_TRANSACTION_POOLING=1 says what the flag says');
    assertOneLineError(await cliWithEnv({ JOB_QUEUE_TRANSACTION_POOLING: 'yes' }, pooled, 'migrate'), 3, 'JQ_BAD_USAGE');
  });

  it('validate, status, jobs list, show, cancel, retry and retry-failed, and export-sql work through it', async () => {
    const validate = await cli(pooled, '--transaction-pooling', 'validate', '--json');
    assert.equal(validate.code, 0, printed(validate));
    assert.deepEqual((({ current, objectsCompared, differences }) => ({ current, objectsCompared, differences }))(JSON.parse(validate.stdout)), {
      current: true,
      objectsCompared: true,
      differences: [],
    });

    // an app straight to PostgreSQL adds the jobs; the bin, through the pooler, acts on them
    app = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: '*' } });
    const [waiting, failed1, failed2, failed3] = await app.jobs.addMany(['w', 'f1', 'f2', 'f3'].map((n) => ({ identifier: 'theirs', payload: { n } })));
    await app.jobs.permanentlyFailJobs([failed1.id, failed2.id, failed3.id], 'broken');

    const status = await cli(pooled, '--transaction-pooling', 'status', '--json');
    assert.equal(status.code, 0, printed(status));
    const counts = JSON.parse(status.stdout);
    assert.deepEqual([counts.jobs.byState.waiting, counts.jobs.byState.failed, counts.pendingMigrations], [1, 3, []]);

    const list = await cli(pooled, '--transaction-pooling', 'jobs', 'list', '--state', 'failed', '--json');
    assert.equal(list.code, 0, printed(list));
    assert.deepEqual(JSON.parse(list.stdout).jobs.map((j: { id: string }) => j.id).sort(), [failed1.id, failed2.id, failed3.id].sort());
    const show = await cli(pooled, '--transaction-pooling', 'jobs', 'show', waiting.id, '--json');
    assert.equal(show.code, 0, printed(show));
    assert.deepEqual(JSON.parse(show.stdout), JSON.parse(JSON.stringify(await app.jobs.getJob(waiting.id))));

    const retry = await cli(pooled, '--transaction-pooling', 'jobs', 'retry', failed1.id, '--json');
    assert.equal(retry.code, 0, printed(retry));
    assert.equal((await app.jobs.getJob(failed1.id))?.state, 'waiting', 'retried');
    const cancel = await cli(pooled, '--transaction-pooling', 'jobs', 'cancel', waiting.id, '--reason', 'not needed');
    assert.equal(cancel.code, 0, printed(cancel));
    assert.equal((await app.jobs.getJob(waiting.id))?.state, 'cancelled');
    const retryFailed = await cli(pooled, '--transaction-pooling', 'jobs', 'retry-failed', '--task', 'theirs', '--json');
    assert.equal(retryFailed.code, 0, printed(retryFailed));
    assert.deepEqual(JSON.parse(retryFailed.stdout), { task: 'theirs', retried: 2 });
    // a refused id through the pooler still gets its own line and code
    const refused = await cli(pooled, '--transaction-pooling', 'jobs', 'retry', failed1.id);
    assertOneLineError(refused, 5, 'JQ_INVALID_STATE');

    const exported = await cli(undefined, '--transaction-pooling', 'export-sql');
    assert.equal(exported.code, 0, printed(exported));
    assert.match(exported.stdout, /create table "job_queue"\.jobs \(/);

    for (const { pid, ...session } of await serverSessions(pooled)) assert.equal(session.prepared, 0, `server connection ${pid} kept no prepared statement`);
    assert.equal(await advisoryLocks(sql), 0);
  });
});
