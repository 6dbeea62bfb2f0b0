import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client, PoolClient } from 'pg';
import { JobQueueDatabase } from '../../libs/job-queue/src/db/job-queue-database';
import { writeReleases } from '../../libs/job-queue/src/worker/release-parameters';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { emptyBatch, insertHeldJobs } from '../support/held-jobs';
import { NotificationRecorder } from '../support/notifications';

/**
 * An add in a transaction of ours and a release send their NOTIFY after their commit, in a
 * transaction of their own that does not wait for its flush (sql/notify-after.ts: PostgreSQL's
 * notification lock is held from a NOTIFYing commit until its WAL flush). What a user relies on:
 * a due job wakes the workers and one added for later does not, a waiter hears every job a flush
 * ended, and the pool's connections come back as they went: every later transaction on them (the
 * app's own data) commits as the server's settings say, in no transaction left open.
 */
describe('the NOTIFY after the commit', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  let database: JobQueueDatabase;
  let jobsChannel: NotificationRecorder;
  let finishedChannel: NotificationRecorder;

  before(async () => {
    ({ db, sql, t } = await openTestApp('notify_after', { jobQueue: { worker: false, externalTasks: '*' } }));
    database = t.app.get(JobQueueDatabase);
    jobsChannel = await NotificationRecorder.listen(db.url, database.sql.channel);
    finishedChannel = await NotificationRecorder.listen(db.url, database.sql.finishedChannel);
    await sql.query(`insert into job_queue.workers (id) values ('notify-worker')`);
  });
  after(async () => {
    await jobsChannel.end();
    await finishedChannel.end();
    await closeTestApp({ db, sql, t });
  });

  /**
   * What every idle connection of the pool says of synchronous_commit (set for the session, which
   * would outlive the NOTIFY's transaction, whatever the server's default) and of an open transaction.
   */
  async function poolSettings(): Promise<Array<{ set_for_session: boolean; in_transaction: boolean }>> {
    const clients: PoolClient[] = [];
    try {
      for (let idle = database.pool.idleCount; clients.length < idle; ) clients.push(await database.pool.connect());
      return await Promise.all(
        clients.map(async (client) => {
          const { rows } = await client.query<{ set_for_session: boolean; in_transaction: boolean }>(
            `select source = 'session' as set_for_session, now() <> statement_timestamp() as in_transaction from pg_settings where name = 'synchronous_commit'`,
          );
          return rows[0];
        }),
      );
    } finally {
      for (const client of clients) client.release();
    }
  }

  it('an add without a manager: one NOTIFY per due job, none for one added for later; the connections stay synchronous', async () => {
    await jobsChannel.barrier();
    const added = await Promise.all(Array.from({ length: 8 }, (_, n) => t.jobs.add('work' as never, { n } as never)));
    const later = await t.jobs.add('work' as never, {} as never, { runAt: new Date(Date.now() + 3_600_000) });
    // a year toISOString writes as +010000, which PostgreSQL does not read: added as node-pg writes it
    const farOff = await t.jobs.add('work' as never, {} as never, { runAt: new Date('+010000-01-01T00:00:00Z') });
    assert.deepEqual([later.state, farOff.state, farOff.runAt.toISOString()], ['scheduled', 'scheduled', '+010000-01-01T00:00:00.000Z']);
    // each names its own job (the id its connection drew, sql/notify-after.ts), the adds running side by side
    const byId = (ids: string[]) => [...ids].sort((a, b) => Number(a) - Number(b));
    assert.deepEqual(byId(await jobsChannel.barrier()), byId(added.map((job) => job.id)), 'one NOTIFY per due add, naming it, none for the later ones');
    assert.equal((await sql.query('select 1 from job_queue.jobs where id = any($1::bigint[])', [[...added.map((job) => job.id), later.id, farOff.id]])).rowCount, 10);
    // the adds ran the insert without its NOTIFY (the NOTIFY after it), on every connection they used
    const { rows: quiet } = await sql.query<{ n: number }>(`
      select count(*)::int as n from pg_stat_activity a where a.datname = current_database() and a.query ilike '%set local synchronous_commit = off%'`);
    assert.ok(quiet[0].n >= 1, 'a connection of the pool last sent the NOTIFY after the commit');
    const settings = await poolSettings();
    assert.ok(settings.length >= 2, `the adds used several connections: ${settings.length}`);
    assert.deepEqual(settings, settings.map(() => ({ set_for_session: false, in_transaction: false })));
  });

  it('addMany without a manager: one NOTIFY if any job is due, none when every one is for later', async () => {
    await jobsChannel.barrier();
    const inAnHour = new Date(Date.now() + 3_600_000);
    const later = await t.jobs.addMany([0, 1].map((n) => ({ identifier: 'work', payload: { n }, runAt: inAnHour }) as never));
    assert.deepEqual(await jobsChannel.barrier(), [], 'no NOTIFY for jobs all added for later');
    const mixed = await t.jobs.addMany([{ identifier: 'work', payload: {}, runAt: inAnHour }, ...[0, 1, 2].map((n) => ({ identifier: 'work', payload: { n } }))] as never[]);
    assert.deepEqual(await jobsChannel.barrier(), [''], 'one NOTIFY for the call');
    assert.equal((await sql.query('select 1 from job_queue.jobs where id = any($1::bigint[])', [[...later, ...mixed].map((job) => job.id)])).rowCount, 6);
  });

  const empty = emptyBatch;

  const held = (count: number) => insertHeldJobs(sql, 'notify-worker', count);

  it('a release tells waiters every job its flush ended, in one NOTIFY, or "*" when their ids do not fit one', async () => {
    const write = writeReleases(database, 'notify-worker', true, () => null);
    const [done, failed] = await held(2);
    await finishedChannel.barrier();
    await write({
      ...empty(),
      completed: [{ id: done.id, claim: done.claim, result: null }],
      failed: [{ id: failed.id, claim: failed.claim, error: 'boom', code: null, delayMs: 0 }],
    });
    assert.deepEqual(await finishedChannel.barrier(), [`${done.id},${failed.id}`]);
    // ids of 2,000 jobs take more than the 7,900 characters a NOTIFY of them carries
    const many = await held(2_000);
    assert.ok(many.map((job) => job.id).join(',').length > 7_900);
    await write({ ...empty(), completed: many.map(({ id, claim }) => ({ id, claim, result: null })) });
    assert.deepEqual(await finishedChannel.barrier(), ['*']);
    assert.equal((await sql.query(`select count(*)::int as n from job_queue.finished_jobs where state = 'completed'`)).rows[0].n, 2_001);
    const settings = await poolSettings();
    assert.deepEqual(settings, settings.map(() => ({ set_for_session: false, in_transaction: false })));
  });
});
