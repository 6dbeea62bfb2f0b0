import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Client } from 'pg';
import { connect } from '../support/database';
import { waitFor } from '../support/wait';
import { LIMITED_RUNS_TABLE, processSuite } from '../support/process-suite';

/** The most attempts at once of `jobIds` by the runs recorded (an attempt with no end, of a killed process, lasts until `killedAt`). */
async function mostAtOnce(sql: Client, jobIds: string[], killedAt: Date): Promise<number> {
  const { rows } = await sql.query<{ most: number }>(
    `with r as (select started_at, coalesce(ended_at, $2::timestamptz) as ended_at from limited_runs where job_id = any($1::bigint[]))
     select coalesce(max((select count(*) from r o where o.started_at <= s.started_at and o.ended_at > s.started_at)), 0)::int as most from r s`,
    [jobIds, killedAt],
  );
  return rows[0].most;
}

/**
 * A slot of a limited task frees when its attempt ends, not when its release lands: a leasing
 * worker (worker/slot-leases.ts) fills its lease with running jobs only, and a counting claim
 * (sql countTaskSlots) does not count the claiming worker's finished jobs whose release is not
 * written yet. With
 * every release blocked (a lock on finished_jobs), a worker under `globalConcurrency: 2` runs job
 * after job, never more than 2 at once; killed then, before any release landed, its finished and
 * claimed jobs stay locked (more rows than the limit, though never more than 2 ran) and count for
 * every other worker until the rescue; a second worker then runs them all, never more than 2 at
 * once either.
 */
describe('globalConcurrency and releases not written yet', () => {
  const s = processSuite('limit_unwritten', { externalTasks: ['limited'], tables: [LIMITED_RUNS_TABLE] });

  it('a worker whose releases are held runs on within the limit; killed, its jobs count until the rescue', async () => {
    const blocker = await connect(s.db.url);
    try {
      const env = { LIMITED: '1', GLOBAL_CONCURRENCY: '2', HEARTBEAT_INTERVAL: '250', WORKER_TIMEOUT: '2000' };
      const [first] = await s.start(1, { concurrency: 4, env });
      await blocker.query('begin');
      // Every release inserts into finished_jobs: a SHARE lock blocks them all; claims do not touch it.
      await blocker.query('lock table job_queue.finished_jobs in share mode');
      const ids = (await s.t.jobs.addMany(Array.from({ length: 12 }, (_, n) => ({ identifier: 'limited' as never, payload: { ms: 50, n } as never })))).map((job) => job.id);
      // Six attempts ended, though no release could land: each freed its slot when it ended.
      const endedCount = async () => (await s.sql.query<{ n: number }>('select count(*)::int as n from limited_runs where ended_at is not null')).rows[0].n;
      await waitFor('six attempts to end with every release held', async () => (await endedCount()) >= 6, 20_000);
      const { rows: [{ released }] } = await s.sql.query<{ released: number }>('select count(*)::int as released from job_queue.jobs where locked_by is null');
      assert.ok(released <= ids.length - 6, 'no release landed');

      await first.kill();
      const { rows: [{ now: killedAt }] } = await s.sql.query<{ now: Date }>('select clock_timestamp() as now');
      const { rows: [{ locked }] } = await s.sql.query<{ locked: number }>('select count(*)::int as locked from job_queue.jobs where locked_by is not null');
      assert.ok(locked > 2, `the dead worker's finished and claimed jobs are all still locked (${locked})`);
      await blocker.query('rollback');

      // A second worker: the dead worker's locked jobs count until the rescue, then run again here.
      await s.start(1, { concurrency: 4, env });
      await waitFor('every job to end', async () => (await s.sql.query('select 1 from limited_runs where job_id = any($1::bigint[]) and ended_at is not null group by job_id', [ids])).rowCount === ids.length, 30_000);
      assert.ok((await mostAtOnce(s.sql, ids, killedAt)) <= 2, 'never more than 2 at once, before the kill, after it, and after the rescue');
      assert.equal(await mostAtOnce(s.sql, ids, killedAt), 2, 'and 2 reached');
    } finally {
      await blocker.end();
    }
  });
});
