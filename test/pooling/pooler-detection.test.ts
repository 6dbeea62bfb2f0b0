import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task } from '../../libs/job-queue/src';
import { resolveOptions } from '../../libs/job-queue/src/core/options';
import { createTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { skipWithoutPgBouncer, usePgBouncer } from '../support/pgbouncer';
import { waitFor } from '../support/wait';

@Injectable()
class Tasks {
  @Task('noop')
  async noop() {}
}

const schemaExists = async (sql: Client) => (await sql.query(`select to_regclass('job_queue.migrations') is not null as exists`)).rows[0].exists as boolean;

/**
 * What happens through PgBouncer in transaction mode when the options do not say so: the app
 * refuses to start with JQ_TRANSACTION_POOLER, before it writes anything, rather than lose its
 * LISTEN, its claim settings, its migration lock and its prepared statements there without a
 * word. A listenUrl that leads to the pooler is refused too, a session-mode pooler is not, and
 * named prepared statements forced on through PgBouncer 1.18 fail with the same clear code.
 */
describe('a transaction-mode pooler the options do not declare', { skip: skipWithoutPgBouncer() }, () => {
  const pgbouncer = usePgBouncer({ defaultPoolSize: 2 });
  const session = usePgBouncer({ poolMode: 'session' });
  let db: TestDatabase;
  let sql: Client;
  const apps: TestApp[] = [];

  before(async () => {
    db = await createTestDatabase('pooler_detection');
    sql = await connect(db.url);
  });
  after(async () => {
    for (const t of apps) await t.close().catch(() => undefined);
    await pgbouncer.stop();
    await session.stop();
    await sql.end();
    await db.drop();
  });

  it('without transactionPooling, the app refuses to start (JQ_TRANSACTION_POOLER, saying to set it) and has written nothing', async () => {
    await assert.rejects(createTestApp({ url: pgbouncer.get().through(db.url), providers: [Tasks] }), (error: { code?: string; message: string }) => {
      assert.equal(error.code, 'JQ_TRANSACTION_POOLER');
      assert.match(error.message, /go through a pooler in transaction mode/);
      assert.match(error.message, /Set transactionPooling: true/);
      return true;
    });
    assert.equal(await schemaExists(sql), false, 'no migration ran');
  });

  it('a listenUrl that leads to the pooler too is refused (JQ_TRANSACTION_POOLER, saying it must reach PostgreSQL directly)', async () => {
    const url = pgbouncer.get().through(db.url);
    await assert.rejects(createTestApp({ url, providers: [Tasks], jobQueue: { transactionPooling: true, listenUrl: url } }), (error: { code?: string; message: string }) => {
      assert.equal(error.code, 'JQ_TRANSACTION_POOLER');
      assert.match(error.message, /listenUrl goes through a pooler in transaction mode too/);
      return true;
    });
  });

  it('a pooler in session mode is no pooler to refuse: the app starts without transactionPooling and runs a job', async () => {
    const t = await createTestApp({ url: session.get().through(db.url), providers: [Tasks] });
    apps.push(t);
    const job = await t.jobs.add('noop');
    assert.equal((await t.jobs.waitForJob(job.id, { timeout: 20_000 })).state, 'completed');
  });

  it('preparedStatements: true through PgBouncer 1.18 (no protocol-level prepared statements): statements fail with JQ_TRANSACTION_POOLER, never silently', async () => {
    const t = await createTestApp({
      url: pgbouncer.get().through(db.url),
      providers: [Tasks],
      jobQueue: { transactionPooling: true, preparedStatements: true, worker: false },
    });
    apps.push(t);
    // concurrent adds on the app's pool: its connections prepare the same statement on the
    // pooler's two server connections in turn, until one meets it there already, or misses it
    let failure: { code?: string; message: string } | undefined;
    let added = 0;
    await waitFor('a prepared statement to reach a server connection that did not prepare it', async () => {
      const results = await Promise.allSettled(Array.from({ length: 10 }, () => t.jobs.add('noop', { prepared: true })));
      added += results.filter((result) => result.status === 'fulfilled').length;
      failure = results.find((result) => result.status === 'rejected')?.reason;
      return failure !== undefined;
    });
    assert.equal(failure!.code, 'JQ_TRANSACTION_POOLER', String(failure));
    assert.match(failure!.message, /prepared statement "jq_job_queue_\d+_\w+" (does not exist|already exists)/);
    assert.match(failure!.message, /preparedStatements: true needs a pooler that keeps prepared statements per client/);
    // waiting or run by the session-mode app's worker
    const { rows: [count] } = await sql.query(`
      select count(*)::int as n from (select payload from job_queue.jobs union all select payload from job_queue.finished_jobs) j
      where payload @> '{"prepared": true}'`);
    assert.equal(count.n, added, 'every add that returned wrote its job, and none that failed did');
  });
});

describe('the pooling options, checked at startup (JQ_INVALID_OPTIONS)', () => {
  const refused = (options: Record<string, unknown>, message: RegExp) =>
    assert.throws(() => resolveOptions(options as never), (error: { code?: string; message: string }) => {
      assert.equal(error.code, 'JQ_INVALID_OPTIONS');
      assert.match(error.message, message);
      return true;
    });

  it('refuses a transactionPooling or preparedStatements that is no boolean', () => {
    refused({ transactionPooling: 'yes' }, /transactionPooling must be a boolean/);
    refused({ transactionPooling: true, preparedStatements: 1 }, /preparedStatements must be a boolean/);
  });

  it('refuses listenUrl without transactionPooling, and one that is no postgres URL, without repeating it (it may hold a password)', () => {
    refused({ listenUrl: 'postgres://db/app' }, /listenUrl is for transactionPooling: true/);
    for (const listenUrl of ['', 'db-host:5432', 'mysql://user:secret@db/app', 42]) {
      assert.throws(() => resolveOptions({ transactionPooling: true, listenUrl } as never), (error: { code?: string; message: string }) => {
        assert.equal(error.code, 'JQ_INVALID_OPTIONS');
        assert.match(error.message, /^JQ_INVALID_OPTIONS: listenUrl must be a connection string such as postgres:\/\//);
        assert.doesNotMatch(error.message, /secret/);
        return true;
      });
    }
  });

  it('fills in the defaults: prepared statements unless transactionPooling, then only if asked for', () => {
    const pick = (options: Record<string, unknown>) => {
      const { transactionPooling, listenUrl, preparedStatements } = resolveOptions(options as never);
      return { transactionPooling, listenUrl, preparedStatements };
    };
    assert.deepEqual(pick({}), { transactionPooling: false, listenUrl: undefined, preparedStatements: true });
    assert.deepEqual(pick({ transactionPooling: true }), { transactionPooling: true, listenUrl: undefined, preparedStatements: false });
    assert.deepEqual(pick({ transactionPooling: true, listenUrl: 'postgresql://u:p@db:5432/app', preparedStatements: true }), {
      transactionPooling: true,
      listenUrl: 'postgresql://u:p@db:5432/app',
      preparedStatements: true,
    });
  });
});
