import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Client } from 'pg';
import { firstValueFrom } from 'rxjs';
import { createJobQueueMigrations, JobQueueMaintenance, OnQueueEvent, Task, type JobContext, type JobQueueModuleOptions, type QueueEvent } from '../../libs/job-queue/src';
import { createTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { skipWithoutPgBouncer, usePgBouncer } from '../support/pgbouncer';
import { waitFor } from '../support/wait';

@Injectable()
class PooledTasks {
  @Task('double', { retryDelay: () => 10 })
  async double(payload: { n: number; fail?: boolean }, ctx: JobContext) {
    if (payload.fail && ctx.job.attempts === 1) throw new Error('first attempt fails');
    const deps = await ctx.dependencyResults();
    const fromDeps = Object.values(deps).reduce((sum, dep) => sum + ((dep as { result?: { n: number } }).result?.n ?? 0), 0);
    return { n: payload.n * 2 + fromDeps };
  }
}

@Injectable()
class QueueEventListener {
  @OnQueueEvent('job:completed')
  heard(_event: QueueEvent) {}
}

const SETTINGS = `select current_setting('enable_seqscan') as enable_seqscan, current_setting('enable_sort') as enable_sort,
  current_setting('synchronous_commit') as synchronous_commit, current_setting('plan_cache_mode') as plan_cache_mode, current_setting('jit') as jit`;

/** Every server connection of a PgBouncer whose pool holds two: two clients, each in an open transaction, must hold both. */
async function serverSettings(url: string): Promise<Array<Record<string, string>>> {
  const clients = [new Client({ connectionString: url }), new Client({ connectionString: url })];
  try {
    for (const client of clients) {
      client.on('error', () => undefined);
      await client.connect();
    }
    const rows: Array<Record<string, string>> = [];
    for (const client of clients) {
      await client.query('begin');
      const { rows: [row] } = await client.query(`select pg_backend_pid() as pid, s.* from (${SETTINGS}) s`);
      rows.push(row);
    }
    return rows;
  } finally {
    for (const client of clients) await client.end().catch(() => undefined);
  }
}

/** Session-level advisory locks anyone holds in the database (read directly, not through the pooler). */
async function advisoryLocks(sql: Client): Promise<number> {
  return (await sql.query(`select count(*)::int as n from pg_locks where locktype = 'advisory' and database = (select oid from pg_database where datname = current_database())`)).rows[0].n;
}

async function invalidIndexes(sql: Client): Promise<number> {
  return (await sql.query(`select count(*)::int as n from pg_index i join pg_class c on c.oid = i.indexrelid join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'job_queue' and not i.indisvalid`)).rows[0].n;
}

/**
 * An app whose DataSource goes through PgBouncer in transaction mode (1.18, whose pool holds
 * two server connections here, so that whatever one client leaves on a server connection the
 * next one meets), with transactionPooling: the migrations, the claim settings, waitForJob and
 * waitForFlow, the vacuum, cluster-wide events; without listenUrl and with it.
 */
describe('an app through PgBouncer in transaction mode', { skip: skipWithoutPgBouncer() }, () => {
  const pgbouncer = usePgBouncer({ defaultPoolSize: 2 });
  const bouncer = () => pgbouncer.get();
  const opened: Array<{ t: TestApp; db: TestDatabase }> = [];
  const sqls: Client[] = [];
  const databases: TestDatabase[] = [];
  after(async () => {
    for (const { t } of opened) await t.close().catch(() => undefined);
    await pgbouncer.stop();
    for (const sql of sqls) await sql.end();
    for (const db of databases) await db.drop();
  });

  /** A fresh database, a direct client on it, and `count` apps started at once through PgBouncer. */
  async function openApps(label: string, jobQueue: (db: TestDatabase) => JobQueueModuleOptions, count = 1, providers: Function[] = [PooledTasks]) {
    const db = await createTestDatabase(label);
    databases.push(db);
    const sql = await connect(db.url);
    sqls.push(sql);
    const warnings: string[] = [];
    const logger = { log: () => undefined, error: () => undefined, warn: (m: unknown) => warnings.push(String(m)) };
    const apps = await Promise.all(
      Array.from({ length: count }, () =>
        createTestApp({ url: bouncer().through(db.url), logger, providers: providers as never, jobQueue: { transactionPooling: true, ...jobQueue(db) } }),
      ),
    );
    for (const t of apps) opened.push({ t, db });
    return { db, sql, apps, warnings };
  }

  describe('without listenUrl (polling)', () => {
    it('two apps migrate a fresh database at once through the pooler, each migration in a transaction: recorded once, no lock left behind, every index valid', async () => {
      const { sql } = await openApps('pooled_migrate', () => ({ worker: false }), 2);
      const { rows } = await sql.query('select name, count(*)::int as n from job_queue.migrations group by name having count(*) > 1');
      assert.deepEqual(rows, [], 'no migration applied twice');
      assert.equal((await sql.query('select count(*)::int as n from job_queue.migrations')).rows[0].n, createJobQueueMigrations().length);
      assert.equal(await advisoryLocks(sql), 0, 'no session advisory lock stays on a server connection of the pooler');
      assert.equal(await invalidIndexes(sql), 0);
    });

    it('jobs run and retry; waitForJob and waitForFlow poll until they finish; the worker says it polls, once', async () => {
      const { apps: [t], warnings } = await openApps('pooled_waits', () => ({ pollInterval: 300 }));
      const job = await t.jobs.add('double', { n: 21, fail: true });
      const done = await t.jobs.waitForJob(job.id, { timeout: 20_000 });
      assert.deepEqual({ state: done.state, attempts: done.attempts, result: done.result }, { state: 'completed', attempts: 2, result: { n: 42 } });

      const { flowId } = await t.jobs.addFlow([
        { ref: 'a', identifier: 'double', payload: { n: 1 } },
        { ref: 'b', identifier: 'double', payload: { n: 2 }, dependsOn: ['a'] },
        { ref: 'c', identifier: 'double', payload: { n: 3 }, dependsOn: ['a', 'b'] },
      ]);
      const results = await t.jobs.waitForFlow(flowId, { timeout: 20_000 });
      assert.deepEqual(results, { a: { n: 2 }, b: { n: 6 }, c: { n: 14 } });

      assert.deepEqual({ listening: t.worker.status().listening, polling: t.worker.status().polling }, { listening: false, polling: true });
      assert.equal(warnings.filter((w) => /transactionPooling is on and listenUrl is not set/.test(w)).length, 1, warnings.join('\n'));
    });

    it('claims leave no setting on the pooler\'s server connections (SET LOCAL in their transaction)', async () => {
      // every job through a claim, none started at its add
      const { db, sql, apps: [t] } = await openApps('pooled_settings', () => ({ localStart: false }));
      const { rows: [defaults] } = await sql.query(SETTINGS); // the server's own, on a direct connection
      for (let i = 0; i < 20; i++) await t.jobs.add('double', { n: i });
      await t.jobs.addMany(Array.from({ length: 50 }, (_, n) => ({ identifier: 'double', payload: { n } })));
      await waitFor('the jobs to run', async () => (await t.jobs.countJobs()).byState.completed === 70);
      for (const { pid, ...settings } of await serverSettings(bouncer().through(db.url))) {
        assert.deepEqual(settings, defaults, `server connection ${pid} kept a claim's setting`);
      }
    });

    it('the maintenance vacuum of jobs runs through the pooler', async () => {
      const { sql, apps: [t] } = await openApps('pooled_vacuum', () => ({ worker: false, externalTasks: '*' }));
      await sql.query('alter table job_queue.jobs set (autovacuum_enabled = false)');
      // 12,000 dead row versions: past the vacuum's threshold (10,000)
      await sql.query(`insert into job_queue.jobs (task_identifier) select 'work' from generate_series(1, 6000)`);
      await sql.query('update job_queue.jobs set priority = 1');
      await sql.query('delete from job_queue.jobs');
      await sql.query('select pg_stat_force_next_flush()');
      await waitFor('the dead rows counted', async () => Number((await sql.query(`select pg_stat_get_dead_tuples('job_queue.jobs'::regclass) as n`)).rows[0].n) >= 12_000);
      const vacuums = async () => Number((await sql.query(`select pg_stat_get_vacuum_count('job_queue.jobs'::regclass) as n`)).rows[0].n);
      const before = await vacuums();
      const errors: unknown[] = [];
      t.worker.events$.subscribe((e) => e.type === 'worker:error' && errors.push(e));
      await t.app.get(JobQueueMaintenance).runOnce();
      assert.equal(await vacuums(), before + 1);
      assert.deepEqual(errors, []);
    });

    it('@OnQueueEvent refuses to start without listenUrl (JQ_INVALID_OPTIONS), and queueEvents$ errors the same way', async () => {
      await assert.rejects(openApps('pooled_events_refused', () => ({ worker: false }), 1, [QueueEventListener]), (error: { code?: string; message: string }) => {
        assert.equal(error.code, 'JQ_INVALID_OPTIONS');
        assert.match(error.message, /@OnQueueEvent on QueueEventListener\.heard needs listenUrl with transactionPooling/);
        return true;
      });
      const { apps: [t] } = await openApps('pooled_events_stream', () => ({ worker: false }));
      await assert.rejects(firstValueFrom(t.jobs.queueEvents$), { code: 'JQ_INVALID_OPTIONS' });
    });
  });

  describe('with listenUrl (LISTEN on a direct connection)', () => {
    it('two apps migrate a fresh database at once on the direct connection: recorded once, no lock left behind, every index valid', async () => {
      const { sql } = await openApps('pooled_migrate_direct', (db) => ({ worker: false, listenUrl: db.url }), 2);
      assert.equal((await sql.query('select count(*)::int as n from job_queue.migrations')).rows[0].n, createJobQueueMigrations().length);
      assert.deepEqual((await sql.query('select name from job_queue.migrations group by name having count(*) > 1')).rows, []);
      assert.equal(await advisoryLocks(sql), 0);
      assert.equal(await invalidIndexes(sql), 0);
    });

    it('a job added by SQL wakes the worker by NOTIFY, and waitForJob hears it finish, long before the one-minute poll', async () => {
      const { sql, apps: [t] } = await openApps('pooled_notify', (db) => ({ listenUrl: db.url, pollInterval: 60_000 }));
      await waitFor('the worker to listen', () => t.worker.status().listening);
      assert.equal(t.worker.status().polling, false);
      const { rows: [row] } = await sql.query(`select id::text from job_queue.add_job('double', '{"n": 5}')`);
      const done = await t.jobs.waitForJob(row.id, { timeout: 20_000 });
      assert.deepEqual(done.result, { n: 10 });
    });

    it('cluster-wide events: @OnQueueEvent starts, and queueEvents$ hears a completion', async () => {
      const { apps: [t] } = await openApps('pooled_events', (db) => ({ listenUrl: db.url }), 1, [PooledTasks, QueueEventListener]);
      const heard: QueueEvent[] = [];
      const subscription = t.jobs.queueEvents$.subscribe((event) => heard.push(event));
      // the workers publish once they have read this process's listener row: jobs are added until one is heard
      const added: string[] = [];
      let lastAdd = 0;
      await waitFor('a completion heard through the direct LISTEN', async () => {
        if (heard.some((event) => event.type === 'job:completed')) return true;
        if (Date.now() - lastAdd > 200) {
          lastAdd = Date.now();
          added.push((await t.jobs.add('double', { n: 1 })).id);
        }
        return false;
      });
      subscription.unsubscribe();
      const completed = heard.find((event) => event.type === 'job:completed')!;
      assert.ok(added.includes(completed.jobId), `the event is of a job added here (${completed.jobId})`);
    });
  });
});
