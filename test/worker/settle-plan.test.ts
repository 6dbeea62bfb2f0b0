import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { GENERIC_BEGIN } from '../../libs/job-queue/src/db/job-queue-database';
import { claimTokenOf } from '../../libs/job-queue/src/sql/release';
import { releaseParameters } from '../../libs/job-queue/src/worker/release-parameters';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { connect } from '../support/database';
import { PREPARE_RELEASE, sqlLiteral } from '../support/plan';

/**
 * A release that finishes a flow's job runs settle_flow_jobs in its trigger, in the release's
 * transaction: with its forced generic plan (runGenericPlan), plpgsql's lookups of a job's
 * edges by `dependency_id` are planned for "any id". An ANALYZE taken while one fan-out filled
 * `job_dependencies` sees one id on every edge (n_distinct 1). Before migration 19, each lookup
 * was then costed as a read of the whole table: the walk down the graph of a failed job was
 * planned for 7 million rows, its hash table built for them (about 40 ms) and, where the server
 * has JIT, compiled (156 ms); without GENERIC_BEGIN's settings, the lookups scanned the table
 * too. 263 ms to fail one job of a 2,000-wide flow on the PostgreSQL 15 service, 4.5 ms with
 * fresh statistics. Migration 19 tells the planner the shape of the edges' keys, whatever an
 * ANALYZE samples; GENERIC_BEGIN forbids the scans and JIT, for statistics that lie some
 * other way. Both are pinned here.
 */
describe('settling a flow in a release, with statistics from one fan-out', () => {
  let c: TestAppContext;
  /** The flow of the 3,000-wide fan-out whose edges alone an ANALYZE samples. */
  let fanOut: string;
  const WIDTH = 2000;

  before(async () => {
    c = await openTestApp('settle_plan', { jobQueue: { worker: false, externalTasks: '*' } });
    await c.sql.query('alter table job_queue.job_dependencies set (autovacuum_enabled = false)');
    // A fan-out of 3,000 from one root, analyzed: the statistics say a dependency_id matches every edge.
    fanOut = (await c.t.jobs.addFlow([{ ref: 'root', identifier: 'work' }, ...Array.from({ length: 3000 }, (_, i) => ({ ref: `f${i}`, identifier: 'work', dependsOn: ['root'] }))])).flowId;
    await c.sql.query(`insert into job_queue.workers (id) values ('settle-worker')`);
  });
  after(() => closeTestApp(c));

  /** ANALYZE of the edges, then what the planner now takes for the distinct share of `dependency_id`. */
  async function analyzedDistinct(): Promise<number> {
    await c.sql.query('analyze job_queue.job_dependencies');
    const { rows } = await c.sql.query(`select n_distinct from pg_stats where schemaname = 'job_queue' and tablename = 'job_dependencies' and attname = 'dependency_id'`);
    return rows[0]?.n_distinct;
  }

  /** Adds a 1 → WIDTH → 1 flow and completes its root, so that its middle jobs are claimable; returns the ids of its middle jobs and of its join. */
  async function fanWithRootDone(label: string): Promise<{ middles: string[]; join: string }> {
    const middles = Array.from({ length: WIDTH }, (_, i) => `${label}${i}`);
    const flow = await c.t.jobs.addFlow([
      { ref: 'root', identifier: 'work' },
      ...middles.map((ref) => ({ ref, identifier: 'work', maxAttempts: 1, dependsOn: ['root'] })),
      { ref: 'join', identifier: 'work', dependsOn: middles },
    ]);
    await release(c.sql, GENERIC_BEGIN, flow.jobs.root.id, 'completed');
    return { middles: middles.map((ref) => flow.jobs[ref].id), join: flow.jobs.join.id };
  }

  /**
   * Claims job `id` for the test's worker and releases it as `outcome` by the release statement,
   * prepared on `client` and run in a transaction begun with `begin` (as runGenericPlan begins);
   * returns how that transaction scanned `job_dependencies` and how long the release took.
   */
  async function release(client: Client, begin: string, id: string, outcome: 'completed' | 'failed'): Promise<{ seq: number; idx: number; ms: number }> {
    const { rows } = await client.query<{ claim: string }>(
      `update job_queue.jobs set locked_by = 'settle-worker', locked_at = now(), attempts = 1 where id = $1 returning ${claimTokenOf('jobs')} as claim`,
      [id],
    );
    assert.equal(rows.length, 1, `job ${id} is claimable`);
    const job = { id, claim: rows[0].claim };
    const batch = {
      completed: outcome === 'completed' ? [{ ...job, result: null }] : [],
      failed: outcome === 'failed' ? [{ ...job, error: 'broken', code: null, delayMs: 0 }] : [],
      started: [],
      progress: new Map<string, string>(),
      claims: new Map<string, string>(),
    };
    const values = releaseParameters('settle-worker', batch, true).map((value) => sqlLiteral(client, value));
    const prepared = await client.query(`select 1 from pg_prepared_statements where name = 'release'`);
    if (prepared.rowCount === 0) await client.query(PREPARE_RELEASE);
    await client.query(begin);
    try {
      const started = performance.now();
      await client.query(`execute release(${values.join(', ')})`);
      const ms = performance.now() - started;
      const { rows: scans } = await client.query<{ seq: number; idx: number }>(
        `select seq_scan::int as seq, idx_scan::int as idx from pg_stat_xact_user_tables where schemaname = 'job_queue' and relname = 'job_dependencies'`,
      );
      await client.query('commit');
      return { ...scans[0], ms };
    } catch (error) {
      await client.query('rollback');
      throw error;
    }
  }

  /**
   * The plans of every statement `client` runs, nested ones (the trigger's, plpgsql's) included, as
   * auto_explain gives them (text): sent to the client as notices.
   */
  async function explainEverything(client: Client): Promise<string[]> {
    const plans: string[] = [];
    await client.query(`load 'auto_explain'`);
    await client.query('set auto_explain.log_min_duration = 0; set auto_explain.log_nested_statements = on; set auto_explain.log_analyze = on; set auto_explain.log_level = notice');
    client.on('notice', (notice) => plans.push(notice.message ?? ''));
    return plans;
  }

  /** Whether this test's user may LOAD auto_explain (a superuser: the README's and CI's servers' user is one). */
  const mayExplain = async () => (await c.sql.query<{ on: boolean }>(`select rolsuper as on from pg_roles where rolname = current_user`)).rows[0].on;

  it('plans the walk down the graph of a failed job for the edges there are, not the whole table (migration 19)', async (t) => {
    if (!(await mayExplain())) return t.skip('auto_explain needs a superuser to LOAD it');
    assert.equal(await analyzedDistinct(), -0.5, "migration 19's share, whatever a sample of one fan-out says (n_distinct 1)");
    const { middles, join } = await fanWithRootDone('w');
    const worker = await connect(c.db.url);
    try {
      const plans = await explainEverything(worker);
      await release(worker, GENERIC_BEGIN, middles[0], 'failed');
      const walk = plans.find((plan) => plan.includes('with recursive doomed'));
      assert.ok(walk, `the walk ran and was explained: ${plans.length} plans`);
      const estimate = Number(/Recursive Union {2}\(cost=[\d.]+ rows=(\d+)/.exec(walk)?.[1]);
      const { rows } = await c.sql.query<{ edges: number }>('select count(*)::int as edges from job_queue.job_dependencies');
      assert.ok(estimate < rows[0].edges, `the walk planned for ${estimate} rows, among ${rows[0].edges} edges`);
      const { rows: joined } = await c.sql.query(`select state from job_queue.finished_jobs where id = $1`, [join]);
      assert.equal(joined[0]?.state, 'failed', 'the join failed with its dependency');
    } finally {
      await worker.end();
    }
  });

  describe('with the statistics of one fan-out as they were before migration 19', () => {
    /** Both keys' options as the migrations left them (n_distinct among them), put back after. */
    let options: Array<{ column: string; options: string[] | null }>;
    before(async () => {
      ({ rows: options } = await c.sql.query(
        `select attname as column, attoptions as options from pg_attribute where attrelid = 'job_queue.job_dependencies'::regclass and attname in ('dependency_id', 'job_id')`,
      ));
      await c.sql.query('alter table job_queue.job_dependencies alter column dependency_id reset (n_distinct), alter column job_id reset (n_distinct)');
      // the case above added a flow: its edges go, so that the ANALYZE samples the fan-out's alone again
      await c.sql.query('delete from job_queue.job_dependencies where flow_id <> $1', [fanOut]);
      assert.equal(await analyzedDistinct(), 1, 'statistics of one fan-out');
    });
    after(async () => {
      for (const { column, options: set } of options) if (set?.length) await c.sql.query(`alter table job_queue.job_dependencies alter column ${column} set (${set.join(', ')})`);
    });

    it('fails one job of a 2,000-wide flow, and its join, reading the edges by index', async () => {
      const { middles, join } = await fanWithRootDone('m');
      // A connection of its own, as a worker's pool connection: plpgsql plans the settle's statements at its first call there.
      const worker = await connect(c.db.url);
      try {
        const failed = await release(worker, GENERIC_BEGIN, middles[0], 'failed');
        assert.equal(failed.seq, 0, `no sequential scan of job_dependencies: ${JSON.stringify(failed)}`);
        assert.ok(failed.idx > 0, `the edges were read by index: ${JSON.stringify(failed)}`);
        const { rows } = await c.sql.query(`select id::text, state, last_error from job_queue.finished_jobs where id = any($1::bigint[]) order by id`, [[middles[0], join]]);
        assert.deepEqual(
          rows.map((r) => [r.id, r.state]),
          [
            [middles[0], 'failed'],
            [join, 'failed'],
          ],
          'the job failed for good, and its join with it',
        );
        const { rows: waiting } = await c.sql.query(`select count(*)::int as n from job_queue.jobs where id = any($1::bigint[])`, [middles.slice(1)]);
        assert.equal(waiting[0].n, WIDTH - 1, 'the other jobs of the fan are still to run');
        console.log(`  (the release failing one job of the fan: ${failed.ms.toFixed(1)} ms)`);
      } finally {
        await worker.end();
      }
    });

    it('without GENERIC_BEGIN\'s setting the same statistics scan the edges: the case above is one that can fail', async () => {
      const { middles } = await fanWithRootDone('n');
      const worker = await connect(c.db.url);
      try {
        const failed = await release(worker, 'begin; set local plan_cache_mode = force_generic_plan', middles[0], 'failed');
        assert.ok(failed.seq > 0, `the stale statistics led to sequential scans: ${JSON.stringify(failed)}`);
        console.log(`  (the same release planned with sequential scans allowed: ${failed.ms.toFixed(1)} ms)`);
      } finally {
        await worker.end();
      }
    });

    const jitAvailable = async () => (await mayExplain()) && (await c.sql.query<{ on: boolean }>(`select pg_jit_available() and current_setting('jit')::bool as on`)).rows[0].on;

    it('compiles none of the settle\'s statements (JIT) in that release', async (t) => {
      if (!(await jitAvailable())) return t.skip('this server has no JIT (no llvmjit, or jit off), or auto_explain may not be loaded (not a superuser)');
      const { middles, join } = await fanWithRootDone('j');
      const worker = await connect(c.db.url);
      try {
        const plans = await explainEverything(worker);
        const failed = await release(worker, GENERIC_BEGIN, middles[0], 'failed');
        assert.ok(plans.some((plan) => plan.includes('settle_flow_jobs')), `the settle ran and was explained: ${plans.length} plans`);
        const compiled = plans.filter((plan) => plan.includes('JIT:'));
        assert.deepEqual(compiled, [], 'no plan was compiled');
        const { rows } = await c.sql.query(`select state from job_queue.finished_jobs where id = $1`, [join]);
        assert.equal(rows[0]?.state, 'failed', 'the join failed with its dependency');
        console.log(`  (the release, explained: ${failed.ms.toFixed(1)} ms)`);
      } finally {
        await worker.end();
      }
    });

    it('with JIT left on, the same release compiles them: the case above is one that can fail', async (t) => {
      if (!(await jitAvailable())) return t.skip('this server has no JIT (no llvmjit, or jit off), or auto_explain may not be loaded (not a superuser)');
      const { middles } = await fanWithRootDone('k');
      const worker = await connect(c.db.url);
      try {
        const plans = await explainEverything(worker);
        const failed = await release(worker, GENERIC_BEGIN.replace('; set local jit = off', ''), middles[0], 'failed');
        assert.ok(plans.some((plan) => plan.includes('JIT:') && plan.includes('with recursive doomed')), 'the walk down the graph was compiled');
        console.log(`  (the release, explained, JIT on: ${failed.ms.toFixed(1)} ms)`);
      } finally {
        await worker.end();
      }
    });
  });
});
