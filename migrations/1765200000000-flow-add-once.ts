import type { QueryRunner } from 'typeorm';
import { applyOnce, forget, type JobQueueMigration } from './ledger';
import { ADD_FLOW_CHECK, addFlowInsert, flowFunctionStatement } from './1764300000000-flow-functions';
import { jobsChannel, quoteIdentifier } from './names';

/** What add_flow and add_flow_unchecked return: each step's job. */
const ADDED_STEPS = 'table (ref text, id bigint, blocked boolean, run_at timestamptz, created_at timestamptz)';

/**
 * A flow's add does its work once (issue 26's addFlow line, docs/benchmark.md "Flows"):
 *
 * - `add_flow_unchecked(steps, trace_id, span_id, trace_flags)`: add_flow's insert without its
 *   check, for addFlow, which has checked the steps already (core/flow-steps.ts: refs, policies,
 *   dependencies, order; the job spec validator: each job). The check was a statement of its own
 *   over the steps, 2–3 ms of 1,000.
 * - Both draw the ids from the jobs' sequence looked up once, where `nextval(pg_get_serial_sequence(…))`
 *   looked it up for every step (10 µs each).
 * - `add_flow(jsonb)`, for SQL callers (a trigger), checks and then calls add_flow_unchecked:
 *   what it accepts, refuses and returns is unchanged.
 *
 * Workers of earlier versions call add_flow, which keeps its signature. A function replaced in a
 * transaction: calls before its commit run the old one, calls after it the new one.
 */
export function createFlowAddOnceMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);
  const sequence = `${s}.jobs`.replace(/'/g, "''");
  const jobs = jobsChannel(schema).replace(/'/g, "''");
  const args = 'steps jsonb, trace_id uuid default null, span_id bigint default null, trace_flags smallint default null';

  return class FlowAddOnce1765200000000 implements JobQueueMigration {
    readonly name = 'FlowAddOnce1765200000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, async () => {
        await q.query(`
          create or replace function ${s}.add_flow_unchecked(${args}) returns ${ADDED_STEPS}
          language plpgsql volatile as $fn$
          #variable_conflict use_column
          declare
            v_sequence regclass := pg_get_serial_sequence('${sequence}', 'id')::regclass;
          begin
${addFlowInsert(s, jobs, 'nextval(v_sequence)', 'add_flow_unchecked')}          end;
          $fn$`);
        await q.query(`
          create or replace function ${s}.add_flow(${args}) returns ${ADDED_STEPS}
          language plpgsql volatile as $fn$
          #variable_conflict use_column
          declare
            v_problem text;
          begin
${ADD_FLOW_CHECK}            return query select * from ${s}.add_flow_unchecked(steps, trace_id, span_id, trace_flags);
          end;
          $fn$`);
      });
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(flowFunctionStatement(schema, 'add_flow'));
      await q.query(`drop function if exists ${s}.add_flow_unchecked(jsonb, uuid, bigint, smallint)`);
      await forget(q, schema, this.name);
    }
  };
}
