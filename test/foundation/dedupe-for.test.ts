import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect } from '../support/database';
import { waitFor } from '../support/wait';

const code = (expected: string) => (error: unknown) => (error as { code?: string }).code === expected;

/**
 * `dedupeFor` (issue 27, throttling): an add with a jobKey whose job was added less than
 * dedupeFor ago, in any state, finished ones too, returns that job and adds nothing; past it,
 * the add does what jobKeyMode says. Checked in the rows: how many jobs a key has, their ids,
 * payloads and revisions.
 */
describe('dedupeFor', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    ({ db, sql, t } = await openTestApp('dedupe_for', { jobQueue: { worker: false, externalTasks: '*' } }));
  });
  after(() => closeTestApp({ db, sql, t }));

  /** Every job of the key, unfinished and finished: id, payload, revision, table. */
  const rowsOf = async (key: string) =>
    (
      await sql.query(
        `select id::text, payload, revision, 'jobs' as place from job_queue.jobs where key = $1
         union all select id::text, payload, 0, 'finished_jobs' from job_queue.finished_jobs where key = $1 order by 1`,
        [key],
      )
    ).rows;
  /** Moves the key's jobs' creation back by `ms`, as if they had been added that long ago. */
  const age = async (key: string, ms: number) => {
    for (const table of ['jobs', 'finished_jobs']) {
      await sql.query(`update job_queue.${table} set created_at = created_at - $2::float8 * interval '1 millisecond' where key = $1`, [key, ms]);
    }
  };

  it('within the window an add returns the waiting job and changes nothing; past it, the key\'s mode applies', async () => {
    const first = await t.jobs.add('sync', { n: 1 }, { jobKey: 'user-1', dedupeFor: '10m' });
    const second = await t.jobs.add('sync', { n: 2 }, { jobKey: 'user-1', dedupeFor: '10m' });
    assert.equal(second.id, first.id);
    assert.deepEqual(second.payload, { n: 1 }, 'the job as it was');
    assert.deepEqual(await rowsOf('user-1'), [{ id: first.id, payload: { n: 1 }, revision: 0, place: 'jobs' }]);
    // without dedupeFor the same add replaces, as ever
    await age('user-1', 11 * 60_000);
    const third = await t.jobs.add('sync', { n: 3 }, { jobKey: 'user-1', dedupeFor: '10m' });
    assert.equal(third.id, first.id, 'replaced in place (jobKeyMode replace)');
    assert.deepEqual(await rowsOf('user-1'), [{ id: first.id, payload: { n: 3 }, revision: 1, place: 'jobs' }]);
    // the window runs from the job's creation, which a replace keeps: while it waits, each later add replaces it (as documented)
    await t.jobs.add('sync', { n: 4 }, { jobKey: 'user-1', dedupeFor: '10m' });
    assert.deepEqual(await rowsOf('user-1'), [{ id: first.id, payload: { n: 4 }, revision: 2, place: 'jobs' }]);
  });

  it('a finished job counts too: within the window its add returns it, past it a new job is added', async () => {
    const first = await t.jobs.add('sync', { n: 1 }, { jobKey: 'user-2', dedupeFor: 60_000 });
    await t.jobs.completeJobs([first.id], { result: 'done' });
    const again = await t.jobs.add('sync', { n: 2 }, { jobKey: 'user-2', dedupeFor: 60_000 });
    assert.equal(again.id, first.id);
    assert.equal(again.state, 'completed');
    assert.deepEqual(await rowsOf('user-2'), [{ id: first.id, payload: { n: 1 }, revision: 0, place: 'finished_jobs' }]);
    await age('user-2', 61_000);
    const later = await t.jobs.add('sync', { n: 3 }, { jobKey: 'user-2', dedupeFor: 60_000 });
    assert.notEqual(later.id, first.id);
    assert.equal(later.state, 'waiting');
    assert.equal((await rowsOf('user-2')).length, 2);
  });

  it('twenty adds of one key at once, each in its own transaction, add one job and all return it', async () => {
    const added = await Promise.all(Array.from({ length: 20 }, (_, n) => t.jobs.add('sync', { n }, { jobKey: 'user-3', dedupeFor: '1h' })));
    const rows = await rowsOf('user-3');
    assert.equal(rows.length, 1);
    assert.deepEqual(new Set(added.map((job) => job.id)), new Set([rows[0].id]));
    assert.equal(rows[0].revision, 0, 'never replaced');
  });

  it('an add in an open transaction holds the next add of its key until it commits, which then returns its job; a rolled-back one leaves room', async () => {
    let finish!: (commit: boolean) => void;
    const decided = new Promise<boolean>((resolve) => (finish = resolve));
    let added!: (id: string) => void;
    const inside = new Promise<string>((resolve) => (added = resolve));
    const held = t.dataSource
      .transaction(async (manager) => {
        added((await t.jobs.add('sync', { by: 'tx' }, { jobKey: 'user-4', dedupeFor: '1h', manager })).id);
        if (!(await decided)) throw new Error('rolled back');
      })
      .catch((error: Error) => error.message);
    const txJob = await inside;
    const other = await connect(db.url);
    try {
      // another add of the key waits for the key's lock, in a backend we can watch
      const waiting = t.jobs.add('sync', { by: 'other' }, { jobKey: 'user-4', dedupeFor: '1h' });
      await waitFor('the second add to wait for the key', async () => {
        const { rows } = await other.query(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event = 'advisory'`);
        return rows[0].n === 1;
      });
      finish(true);
      await held;
      assert.equal((await waiting).id, txJob, 'it returned the committed job');
      assert.equal((await rowsOf('user-4')).length, 1);

      // the same, rolled back: the waiting add adds its own
      let rollback!: (commit: boolean) => void;
      const decided2 = new Promise<boolean>((resolve) => (rollback = resolve));
      let added2!: () => void;
      const inside2 = new Promise<void>((resolve) => (added2 = resolve));
      const held2 = t.dataSource
        .transaction(async (manager) => {
          await t.jobs.add('sync', { by: 'tx' }, { jobKey: 'user-5', dedupeFor: '1h', manager });
          added2();
          if (!(await decided2)) throw new Error('rolled back');
        })
        .catch((error: Error) => error.message);
      await inside2;
      const waiting2 = t.jobs.add('sync', { by: 'other' }, { jobKey: 'user-5', dedupeFor: '1h' });
      await waitFor('the add to wait for the key', async () => {
        const { rows } = await other.query(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event = 'advisory'`);
        return rows[0].n === 1;
      });
      rollback(false);
      assert.equal(await held2, 'rolled back');
      const own = await waiting2;
      assert.deepEqual(await rowsOf('user-5'), [{ id: own.id, payload: { by: 'other' }, revision: 0, place: 'jobs' }]);
    } finally {
      await other.end();
    }
  });

  it('in a caller\'s transaction stricter than READ COMMITTED it is refused (JQ_ISOLATION_LEVEL), nothing added', async () => {
    for (const isolation of ['REPEATABLE READ', 'SERIALIZABLE'] as const) {
      await assert.rejects(
        t.dataSource.transaction(isolation, (manager) => t.jobs.add('sync', {}, { jobKey: 'user-7', dedupeFor: '1h', manager })),
        code('JQ_ISOLATION_LEVEL'),
        isolation,
      );
    }
    assert.deepEqual(await rowsOf('user-7'), []);
    // the same add without dedupeFor is a plain keyed add, at any level
    await t.dataSource.transaction('REPEATABLE READ', (manager) => t.jobs.add('sync', {}, { jobKey: 'user-7', manager }));
    assert.equal((await rowsOf('user-7')).length, 1);
  });

  it('two addMany naming the same throttled keys in opposite orders, at once, both finish (no deadlock) and add each key once', async () => {
    const specs = (keys: string[]) => keys.map((jobKey) => ({ identifier: 'sync', jobKey, dedupeFor: '1h' }));
    for (let round = 0; round < 5; round++) {
      const keys = Array.from({ length: 6 }, (_, n) => `order-${round}-${n}`);
      const [ab, ba] = await Promise.all([t.jobs.addMany(specs(keys)), t.jobs.addMany(specs([...keys].reverse()))]);
      assert.deepEqual(ab.map((job) => job.id), [...ba].reverse().map((job) => job.id), 'both got the same job for each key');
      for (const key of keys) assert.equal((await rowsOf(key)).length, 1, key);
    }
  });

  it('addMany takes each throttled spec in order, in one transaction', async () => {
    const jobs = await t.jobs.addMany([
      { identifier: 'sync', payload: { n: 1 }, jobKey: 'user-6', dedupeFor: '1h' },
      { identifier: 'plain', payload: { n: 2 } },
      { identifier: 'sync', payload: { n: 3 }, jobKey: 'user-6', dedupeFor: '1h' },
    ]);
    assert.equal(jobs.length, 3);
    assert.equal(jobs[2].id, jobs[0].id);
    assert.notEqual(jobs[1].id, jobs[0].id);
    assert.deepEqual(await rowsOf('user-6'), [{ id: jobs[0].id, payload: { n: 1 }, revision: 0, place: 'jobs' }]);
  });

  it('bad dedupeFor is refused before anything is written', async () => {
    const before = (await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n;
    await assert.rejects(t.jobs.add('sync', {}, { dedupeFor: '1h' }), code('JQ_INVALID_SPEC'), 'no jobKey');
    for (const bad of [0, -5, 'soon', '1y', Number.NaN, 366 * 86_400_000, {}]) {
      await assert.rejects(t.jobs.add('sync', {}, { jobKey: 'bad', dedupeFor: bad as string }), code('JQ_INVALID_SPEC'), `dedupeFor ${String(bad)}`);
    }
    await assert.rejects(
      t.jobs.addMany([{ identifier: 'sync', jobKey: 'ok', dedupeFor: '1h' }, { identifier: 'sync', jobKey: 'bad', dedupeFor: -1 }]),
      code('JQ_INVALID_SPEC'),
    );
    assert.equal((await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n, before);
  });
});
