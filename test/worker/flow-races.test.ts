import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

/**
 * Two dependencies of one job finishing in concurrent transactions. The counter is decremented
 * under the dependent's row lock, so whichever commits second sees the first's count: the
 * dependent is unblocked exactly once, never zero times, never twice.
 */
describe('flows: dependencies finishing at once', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let first: Client;
  let second: Client;
  /** Adds flows; runs none of their jobs (worker: false). */
  let producer: TestApp;

  before(async () => {
    db = await createTestDatabase('flow_races');
    sql = await connect(db.url);
    first = await connect(db.url);
    second = await connect(db.url);
    producer = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: ['step', 'step_b'] } });
  });
  after(async () => {
    await producer?.close();
    for (const client of [sql, first, second]) await client?.end();
    await db.drop();
  });

  /** A flow whose `join` waits for `a` and `b`, neither run by anyone. */
  async function fork() {
    const flow = await producer.jobs.addFlow([
      { ref: 'a', identifier: 'step' },
      // another task than a's: the two completions count into different finished_counts rows, so the only lock they share is the join's
      { ref: 'b', identifier: 'step_b' },
      { ref: 'join', identifier: 'step', dependsOn: ['a', 'b'] },
    ]);
    return { a: flow.jobs.a.id, b: flow.jobs.b.id, join: flow.jobs.join.id, flowId: flow.flowId };
  }

  /** Where the join is now: how many rows of it in jobs and in blocked_jobs, and its flow's count. */
  async function placeOf(ids: Awaited<ReturnType<typeof fork>>) {
    const { rows: [place] } = await sql.query(
      `select (select count(*) from job_queue.jobs where id = $1)::int as in_jobs,
              (select count(*) from job_queue.blocked_jobs where id = $1)::int as blocked,
              (select unfinished from job_queue.flows where id = $2) as unfinished,
              (select count(*) from job_queue.job_dependencies where job_id = $1 and state = 'completed')::int as settled`,
      [ids.join, ids.flowId],
    );
    return place;
  }

  it('the second completion waits on the first one\'s lock of the dependent, then unblocks it: exactly once', async () => {
    const ids = await fork();
    await first.query('begin');
    await first.query('select job_queue.complete_jobs($1::bigint[], null)', [[ids.a]]);
    await second.query('begin');
    const pid = (await second.query('select pg_backend_pid() as pid')).rows[0].pid;
    // The barrier: the second completion is under way and waiting for the first one's lock on
    // the join's row (it holds the row's tuple lock, and waits for the first transaction to end).
    const pending = second.query('select job_queue.complete_jobs($1::bigint[], null)', [[ids.b]]);
    await waitFor('the second completion to wait for the first one\'s lock on the join', async () => {
      const { rows } = await sql.query(
        `select exists (select 1 from pg_locks where pid = $1 and locktype = 'tuple' and relation = 'job_queue.blocked_jobs'::regclass)
            and exists (select 1 from pg_locks where pid = $1 and not granted) as waiting`,
        [pid],
      );
      return rows[0].waiting === true;
    });
    assert.deepEqual(await placeOf(ids), { in_jobs: 0, blocked: 1, unfinished: 3, settled: 0 }, 'nothing is visible before a commit');
    await first.query('commit');
    await pending;
    await second.query('commit');
    assert.deepEqual(await placeOf(ids), { in_jobs: 1, blocked: 0, unfinished: 1, settled: 2 });
  });

  it('many forks completed by two connections at once, in opposite orders: every join unblocked exactly once', async () => {
    const forks = await Promise.all(Array.from({ length: 40 }, () => fork()));
    const run = async (client: Client, order: Array<(typeof forks)[number]>, which: 'a' | 'b') => {
      for (const ids of order) {
        await client.query('begin');
        await client.query('select job_queue.complete_jobs($1::bigint[], null)', [[ids[which]]]);
        await client.query('commit');
      }
    };
    await Promise.all([run(first, forks, 'a'), run(second, [...forks].reverse(), 'b')]);
    for (const ids of forks) assert.deepEqual(await placeOf(ids), { in_jobs: 1, blocked: 0, unfinished: 1, settled: 2 });
  });

  /**
   * Runs `statement` on `second` beside `first`'s open transaction, and commits that transaction
   * once the statement waits for one of its locks (the barrier), or has ended without waiting
   * (what a function that takes no such lock does); resolves when the statement has.
   */
  async function besideOpenTransaction(what: string, statement: () => Promise<unknown>): Promise<void> {
    const pid = (await second.query('select pg_backend_pid() as pid')).rows[0].pid;
    const running = statement();
    let done = false;
    void running.then(() => (done = true), () => (done = true));
    await waitFor(`${what} to wait for the open transaction, or to end`, async () => {
      const { rows } = await sql.query('select exists (select 1 from pg_locks where pid = $1 and not granted) as waiting', [pid]);
      return done || rows[0].waiting === true;
    });
    await first.query('commit');
    await running;
  }

  it("a retry that brings a dependency-failed join back while its other dependency completes: the join waits for what is left, then runs", async () => {
    // a fails for good, and the join fails with JQ_DEPENDENCY_FAILED; then, at once, b completes
    // (first, not committed yet) and a is retried (second), which brings the join back to blocked
    const ids = await fork();
    await sql.query(`select job_queue.permanently_fail_jobs($1::bigint[], 'a fails')`, [[ids.a]]);
    assert.deepEqual(await placeOf(ids), { in_jobs: 0, blocked: 0, unfinished: 1, settled: 0 }, 'b waits; the join failed (in neither jobs nor blocked_jobs)');
    await first.query('begin');
    await first.query('select job_queue.complete_jobs($1::bigint[], null)', [[ids.b]]);
    await besideOpenTransaction('the retry', () => second.query('select id from job_queue.retry_jobs($1::bigint[])', [[ids.a]]));
    const { rows: [join] } = await sql.query('select pending from job_queue.blocked_jobs where id = $1', [ids.join]);
    assert.deepEqual(join, { pending: 1 }, 'the join is blocked again, waiting for a alone: b completed');
    await sql.query('select job_queue.complete_jobs($1::bigint[], null)', [[ids.a]]);
    assert.deepEqual(await placeOf(ids), { in_jobs: 1, blocked: 0, unfinished: 1, settled: 2 }, 'a completed: the join moved to jobs');
  });

  it('two retries at once that both bring the same join back: it is counted once, and the flow completes', async () => {
    const ids = await fork();
    for (const id of [ids.a, ids.b]) await sql.query(`select job_queue.permanently_fail_jobs($1::bigint[], 'fails')`, [[id]]);
    await first.query('begin');
    await first.query('select id from job_queue.retry_jobs($1::bigint[])', [[ids.a]]);
    await besideOpenTransaction('the second retry', () => second.query('select id from job_queue.retry_jobs($1::bigint[])', [[ids.b]]));
    const { rows: [join] } = await sql.query('select pending from job_queue.blocked_jobs where id = $1', [ids.join]);
    assert.deepEqual(join, { pending: 2 }, 'the join is blocked again, waiting for both');
    assert.deepEqual(await placeOf(ids), { in_jobs: 0, blocked: 1, unfinished: 3, settled: 0 }, 'the flow counts a, b and the join once each');
    await sql.query('select job_queue.complete_jobs($1::bigint[], null)', [[ids.a, ids.b]]);
    await sql.query('select job_queue.complete_jobs($1::bigint[], null)', [[ids.join]]);
    const { rows: [flow] } = await sql.query('select state, unfinished from job_queue.flows where id = $1', [ids.flowId]);
    assert.deepEqual(flow, { state: 'completed', unfinished: 0 });
  });

  it('both dependencies finished by one statement unblock the dependent once', async () => {
    const ids = await fork();
    await sql.query('select job_queue.complete_jobs($1::bigint[], null)', [[ids.a, ids.b]]);
    assert.deepEqual(await placeOf(ids), { in_jobs: 1, blocked: 0, unfinished: 1, settled: 2 });
  });
});
