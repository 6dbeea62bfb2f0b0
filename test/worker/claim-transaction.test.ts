import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Pool } from 'pg';
import { executePrepared } from '../../libs/job-queue/src/db/sql-prepared';
import { ClaimConnection } from '../../libs/job-queue/src/worker/claim-connection';
import { connect, createTestDatabase } from '../support/database';

/**
 * A limited claim (worker/limited-claim.ts) counts a task's held jobs after waiting for the
 * task's lock: at REPEATABLE READ that count would read the snapshot taken before the wait, and
 * the limit could be exceeded. So a claim's transaction is READ COMMITTED whatever the
 * database's default, on each of ClaimConnection's paths: the kept connection, the one through a
 * pooler (settings local to the transaction), and a small pool's connection of its own. A
 * rate-limited claim's statement is prepared and planned before its first message, not under
 * the task's lock (through a pooler it is written in whole and never prepared).
 */
describe('claim transactions', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  const pools: Pool[] = [];

  before(async () => {
    db = await createTestDatabase('claim_tx');
    const sql = await connect(db.url);
    await sql.query(`alter database "${db.name}" set default_transaction_isolation = 'repeatable read'`);
    await sql.end();
  });
  after(async () => {
    await Promise.all(pools.map((pool) => pool.end()));
    await db.drop();
  });

  it('are READ COMMITTED on a database whose default is REPEATABLE READ, on every path, in one message too', async () => {
    const isolation = async (max: number, pooled: boolean) => {
      const pool = new Pool({ connectionString: db.url, max });
      pools.push(pool);
      const claims = new ClaimConnection(() => pool, pooled);
      const read = `select current_setting('transaction_isolation') as level`;
      // the opening (sent with the begin: a limited claim's lock) and a statement after it
      const [opened, after] = await claims.transaction<{ level: string }, { level: string }>(read, async (client, rows) => [...rows, ...(await client.query<{ level: string }>(read)).rows]);
      // a message of several statements (a rate-limited claim): begin, the lock, the claim, commit
      const [inMessage] = await claims.oneMessage<{ level: string }>(() => ({ statements: [`select 1`, read] }));
      const [{ level }] = (await pool.query(`select current_setting('transaction_isolation') as level`)).rows;
      await claims.close();
      return [opened.level, after.level, inMessage.level, level];
    };
    // [in the claim's transaction: its opening, then a statement; in one message; the database's default]
    const claimed = ['read committed', 'read committed', 'read committed', 'repeatable read'];
    assert.deepEqual(await isolation(10, false), claimed, 'the kept connection');
    assert.deepEqual(await isolation(10, true), claimed, 'through a pooler');
    assert.deepEqual(await isolation(2, false), claimed, 'a small pool');
  });

  it('send a statement\'s PREPARE and planning (executePrepared) before the message, in a transaction of their own, once per connection, the plan generic', async () => {
    const prepared = async (max: number) => {
      const pool = new Pool({ connectionString: db.url, max });
      pools.push(pool);
      const claims = new ClaimConnection(() => pool);
      // After the EXECUTE, in the message's transaction: how often a generic and a custom plan were used, and whether the PREPARE came before this transaction began.
      const seen = `select generic_plans::int as generic, custom_plans::int as custom, prepare_time < now() as before_begin
        from pg_prepared_statements where name like 'jq_sql_planned_%'`;
      const claim = (n: number) =>
        claims.oneMessage<{ generic: number; custom: number; before_begin: boolean }>((client) => {
          const { preparation, statement } = executePrepared(client, 'test', 'planned', 'select $1::int + 1 as n', ['int'], [n]);
          return { preparation, statements: [statement, seen] };
        });
      const claimed = [await claim(1), await claim(2)];
      await claims.close();
      return claimed.map((rows) => rows.map(({ generic, custom, before_begin }) => ({ generic, custom, before_begin })));
    };
    // The EXPLAIN used a generic plan, before the first message began; each message used it again, and no custom plan was ever made.
    const expected = [[{ generic: 2, custom: 0, before_begin: true }], [{ generic: 3, custom: 0, before_begin: true }]];
    assert.deepEqual(await prepared(10), expected, 'the kept connection');
    assert.deepEqual(await prepared(1), expected, 'a small pool (the settings local to each transaction)');
  });
});
