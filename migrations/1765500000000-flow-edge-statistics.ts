import type { QueryRunner } from 'typeorm';
import { applyOnce, forget, type JobQueueMigration } from './ledger';
import { quoteIdentifier } from './names';

/** How many distinct values of each key of an edge the planner is told there are: half the rows, two edges a job on average. */
export const EDGE_KEY_DISTINCT = -0.5;

/**
 * `job_dependencies`' two keys, `dependency_id` and `job_id`, with a fixed share of distinct
 * values for the planner (`n_distinct`), whatever an ANALYZE samples.
 *
 * Why: an ANALYZE taken while a wide fan-out fills the table (autovacuum's, a minute after it)
 * sees one `dependency_id` on every edge, and says so (`n_distinct` 1) until the next one.
 * The flow functions then look up "the edges of a job" for any job as if each lookup returned the
 * whole table. Measured on the PostgreSQL 15 service, a 3,000-wide fan-out analyzed, then a
 * release failing one job of a 2,000-wide flow: 263 ms, of which 156 ms compiling the settle's
 * walk down the graph (JIT: its estimate was 7 million rows) and about 40 ms building that walk's
 * hash table for 7 million rows at its start. With this: 5.9 ms, as with fresh statistics (4.5).
 * A flow's edges are two per job on average (a chain one, a 1 → n → 1 fan 2n for n + 2 jobs). The
 * statements that settle and retry flows read them by one job's id, by index (those of a whole
 * flow, by `flow_id`, are not concerned): the estimate matters for the size of what is built
 * around the lookups, not for the lookups.
 *
 * The setting takes effect at an ANALYZE, which this migration runs (a sample of the table; it
 * takes a lock that adds, claims and releases do not wait for), as does its `down()`. It replaces
 * any `n_distinct` an operator had set on those columns; `down()` resets them to PostgreSQL's
 * own estimate. Workers of earlier versions run the same functions and get the same plans:
 * nothing else changes.
 */
export function createFlowEdgeStatisticsMigration(schema: string): new () => JobQueueMigration {
  const edges = `${quoteIdentifier(schema)}.job_dependencies`;
  return class FlowEdgeStatistics1765500000000 implements JobQueueMigration {
    readonly name = 'FlowEdgeStatistics1765500000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, async () => {
        await q.query(`alter table ${edges} alter column dependency_id set (n_distinct = ${EDGE_KEY_DISTINCT}), alter column job_id set (n_distinct = ${EDGE_KEY_DISTINCT})`);
        await q.query(`analyze ${edges}`);
      });
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(`alter table ${edges} alter column dependency_id reset (n_distinct), alter column job_id reset (n_distinct)`);
      await q.query(`analyze ${edges}`);
      await forget(q, schema, this.name);
    }
  };
}
