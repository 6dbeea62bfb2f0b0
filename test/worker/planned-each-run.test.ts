import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { JobQueueDatabase, PLANNED_AT_EACH_RUN } from '../../libs/job-queue/src/db/job-queue-database';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';

/**
 * A heartbeat and a pause's give-back run rarely; prepared, PostgreSQL kept a generic plan for
 * them after a few runs, with what the statistics of `jobs` said then, and one made on a few rows
 * scanned the whole table once a backlog came (docs/maintainers.md, "Generic plans outlive the
 * statistics they were made on"). They go unprepared, so that each run is planned for the table
 * as it is.
 */
describe('statements planned at each run', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => ({ db, sql, t } = await openTestApp('planned_each_run', { jobQueue: { worker: false, externalTasks: '*' } })));
  after(() => closeTestApp({ db, sql, t }));

  it('the heartbeat and the give-back by id are never kept prepared on their connection; the others are', async () => {
    const database = t.app.get(JobQueueDatabase);
    const client = await database.pool.connect();
    try {
      await database.runOn(client, 'registerWorker', ['plans-worker', 20_000, null, null, null]);
      // Past the five runs after which PostgreSQL may keep a prepared statement's generic plan.
      for (let run = 0; run < 7; run++) {
        assert.equal((await database.runOn<{ id: string }>(client, 'heartbeatWorker', ['plans-worker']))[0]?.id, 'plans-worker', 'the heartbeat still finds its row');
        await database.runOn(client, 'giveBackJobsById', ['plans-worker', []]);
      }
      const { rows } = await client.query<{ statement: string }>('select statement from pg_prepared_statements');
      const kept = rows.map((row) => row.statement.trim());
      assert.ok(kept.includes(database.sql.registerWorker.trim()), `another statement run the same way is kept prepared (the check sees them): ${kept.length} kept`);
      for (const statement of PLANNED_AT_EACH_RUN) assert.ok(!kept.includes(database.sql[statement].trim()), `${statement} is not kept prepared`);
    } finally {
      client.release();
    }
  });
});
