import type { Client } from 'pg';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { RELEASE_TYPES } from '../../libs/job-queue/src/worker/release-parameters';

/** A node of a plan as EXPLAIN (format json) gives it; the Actual fields with ANALYZE only. */
export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Index Cond'?: string;
  'Scan Direction'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PlanNode[];
}

/** A statement's plan as a flat list of its nodes. */
export function planNodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(planNodes)];
}

/**
 * Leaves `jobs` as the vacuum of a drained table does: 20,000 jobs added and all but the last
 * deleted, then vacuumed, so that its pages stay and its statistics say it holds about one row.
 * Plans made on such statistics once took jobs for empty and walked it once per named id.
 * Autovacuum is turned off for the table (in the test's own database): an analyze of its own
 * between this and the plan under test made the statistics right again (reltuples 5,001 seen
 * in a full run). A test that wants them fresh analyzes the table itself.
 */
export async function statisticsSayJobsIsEmpty(sql: Client): Promise<void> {
  await sql.query('alter table job_queue.jobs set (autovacuum_enabled = false)');
  await sql.query(`insert into job_queue.jobs (task_identifier) select 'work' from generate_series(1, 20000)`);
  await sql.query(`insert into job_queue.jobs (task_identifier, run_at) values ('work', now() + interval '1 day')`);
  await sql.query(`delete from job_queue.jobs where run_at <= now()`);
  await sql.query('vacuum job_queue.jobs');
}

/** The plan of `text` for `values`, run (EXPLAIN ANALYZE), and its time: as planned for these values, or the generic plan of a prepared statement (as a named statement may end up with). */
export async function explainStatement(sql: Client, text: string, values: unknown[], generic: boolean): Promise<{ plan: PlanNode; ms: number }> {
  const read = (rows: Array<Record<string, unknown>>) => {
    const [result] = rows[0]['QUERY PLAN'] as Array<{ Plan: PlanNode; 'Execution Time': number }>;
    return { plan: result.Plan, ms: result['Execution Time'] };
  };
  if (!generic) return read((await sql.query(`explain (analyze, format json) ${text}`, values)).rows);
  await sql.query(`set plan_cache_mode = force_generic_plan`);
  try {
    await sql.query(`prepare explained as ${text}`);
    const args = values.map((v) => (v === null ? 'null' : `'${String(v).replace(/'/g, "''")}'`)).join(', ');
    return read((await sql.query(`explain (analyze, format json) execute explained${values.length ? `(${args})` : ''}`)).rows);
  } finally {
    await sql.query('deallocate all; reset plan_cache_mode');
  }
}

/** SQL PREPARE of releaseJobs as `release`, with its parameters' types: its plan can then be made, and EXPLAINed, as runGenericPlan makes it. */
export const PREPARE_RELEASE = `prepare release(${RELEASE_TYPES.join(', ')}) as ${createQueries('job_queue').releaseJobs}`;

/** `value` written as an SQL literal, for an EXECUTE (EXPLAIN EXECUTE takes no bind parameters): arrays of ids, text, numbers, booleans, null. */
export function sqlLiteral(client: Client, value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return `'{${value.join(',')}}'`;
  return typeof value === 'string' ? client.escapeLiteral(value) : String(value);
}
