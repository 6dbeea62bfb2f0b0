import { Inject, Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { JobQueueError } from '../core/errors';
import { checkFlowJobSpec, orderFlowSteps, type AddedFlow, type DependencyResult, type Flow, type FlowEdge, type FlowState, type FlowStep } from '../core/flow-steps';
import { compareJobIds, type Job, type JobSpec } from '../core/job';
import { toJsonText } from '../core/json';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { toTraceColumns, traceValues } from '../core/trace-context';
import { validateJobIds, type ValidJob } from '../core/validate-job-spec';
import { onBorrowedConnection } from '../db/borrowed-connection';
import { JobQueueDatabase } from '../db/job-queue-database';
import { QueueEventAudience } from '../events/queue-event-audience';
import { AmbientTransaction } from '../peers/ambient-transaction';
import { JobQueueTelemetry } from '../telemetry/job-queue-telemetry';
import { addedJobs, type AddedRow } from './added-jobs';
import { checkManager } from './check-manager';
import { JobSpecValidator } from './job-spec-validator';
import { JobWaiter, type WaitRead } from './job-waiter';
import { readJobs } from './read-jobs';

/** waitForFlow() ended without results: JQ_FLOW_FAILED (naming the failed refs) or JQ_FLOW_CANCELLED, with the flow as it ended. */
export class FlowEndedError extends JobQueueError {
  constructor(
    code: 'JQ_FLOW_FAILED' | 'JQ_FLOW_CANCELLED',
    detail: string,
    readonly flow: Flow,
  ) {
    super(code, detail);
  }
}

/** A row of sql dependencyResults. */
interface DependencyRow {
  ref: string;
  policy: FlowEdge['policy'];
  state: DependencyResult['state'] | null;
  result: unknown;
  error: string | null;
}

/**
 * Flows for JobQueueService (addFlow, getFlow, waitForFlow, cancelFlow, completeJobs) and for
 * the worker's handlers (ctx.dependencyResults, ctx.continueWith). The rules themselves live
 * in the database (sql/flows.ts; the trigger and functions of migration Flows1764300000000),
 * so that every statement that finishes a flow's job settles its dependents, whoever runs it.
 */
@Injectable()
export class JobFlows {
  constructor(
    private readonly db: JobQueueDatabase,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
    private readonly specs: JobSpecValidator,
    private readonly telemetry: JobQueueTelemetry,
    private readonly ambient: AmbientTransaction,
    private readonly waiter: JobWaiter,
    private readonly audience: QueueEventAudience,
  ) {}

  async add(steps: readonly FlowStep[], options: { manager?: EntityManager } = {}): Promise<AddedFlow> {
    const manager = options?.manager ?? this.ambient.manager();
    checkManager(manager, this.db.dataSource);
    const ordered = orderFlowSteps(steps);
    const jobs = ordered.map((step) => {
      const { ref: _ref, identifier, payload, dependsOn: _dependsOn, onDependencyFailure: _policy, ...spec } = step;
      try {
        return this.specs.validate(identifier, payload, spec);
      } catch (error) {
        JobQueueError.rethrowAt(`addFlow, step '${step.ref}'`, error);
      }
    });
    const json = `[${ordered.map((step, index) => stepJson(step, jobs[index])).join(',')}]`;
    const flow: AddedFlow = { flowId: '', jobs: {} };
    await this.telemetry.traceAdd(jobs, 'addFlow', async (carrier) => {
      const trace = toTraceColumns(carrier);
      const rows = await this.db.run<AddedRow & { ref: string; blocked: boolean }>('addFlow', [json, ...traceValues(trace)], manager);
      const added = addedJobs(jobs, rows, trace);
      // the flow's id is its first job's (add_flow's smallest)
      flow.flowId = rows.reduce((min, row) => (compareJobIds(row.id, min) < 0 ? row.id : min), rows[0].id);
      rows.forEach((row, index) => {
        const job = { ...added[index], flowId: flow.flowId, flowRef: row.ref };
        flow.jobs[row.ref] = row.blocked ? { ...job, state: 'blocked', runAt: jobs[index].runAt ?? job.createdAt } : job;
      });
      return added;
    });
    return flow;
  }

  /**
   * The flow with this id (a job added alone is a flow of its own), or null. Its row, job ids,
   * jobs and edges are read in one snapshot (a REPEATABLE READ transaction): read in several,
   * a completion committed between them (with its continuation) showed the ids of before it
   * and the jobs of after it, a chain of one finished job, and waitForFlow resolved early.
   */
  async get(id: string): Promise<Flow | null> {
    const [flowId] = validateJobIds([id]);
    return this.db.dataSource.transaction('REPEATABLE READ', async (manager) => {
      const [row] = await this.db.run<{ state: FlowState }>('getFlow', [flowId], manager);
      const ids = await this.db.run<{ id: string }>('getFlowJobIds', [flowId], manager);
      if (!row && ids.length === 0) return null;
      const jobs = await this.jobsById(ids.map((r) => r.id), manager);
      const edges = row ? (await this.db.run<EdgeRow>('getFlowEdges', [flowId], manager)).map(toEdge) : [];
      const state = row?.state ?? (jobs.some((job) => job.finishedAt === null) ? 'running' : ((jobs[jobs.length - 1]?.state ?? 'completed') as FlowState));
      return { flowId, state, jobs, edges };
    });
  }

  /** Resolves with each ref's result (a chain's last job's) once the flow completed; see JobQueueService.waitForFlow. */
  wait(id: string, timeoutMs: number | undefined): Promise<Record<string, unknown>> {
    const [flowId] = validateJobIds([id]);
    const read = async (): Promise<WaitRead<Record<string, unknown>>> => {
      const flow = await this.get(flowId);
      if (!flow) return { error: new JobQueueError('JQ_FLOW_NOT_FOUND', `flow ${flowId} does not exist (or its retention is over)`) };
      if (flow.state === 'running') return undefined;
      // The flow's row outlives its jobs: with retention.completed 0 they go once it ended, and no result is left to give.
      if (flow.state === 'completed' && flow.jobs.length === 0) return { error: new JobQueueError('JQ_FLOW_NOT_FOUND', `flow ${flowId} completed, and its jobs' retention is over (retention.completed 0 keeps none)`) };
      if (flow.state === 'completed') return { value: resultsByRef(flow) };
      const ended = flow.jobs.filter((job) => job.state === 'failed' || job.state === 'cancelled').map((job) => job.flowRef ?? job.id);
      const refs = [...new Set(ended)].join(', ');
      return flow.state === 'failed'
        ? { error: new FlowEndedError('JQ_FLOW_FAILED', `flow ${flowId} failed: ${refs}`, flow) }
        : { error: new FlowEndedError('JQ_FLOW_CANCELLED', `flow ${flowId} was cancelled: ${refs}`, flow) };
    };
    return this.waiter.waitUntil(flowId, `flow ${flowId}`, read, timeoutMs);
  }

  /** Cancels every unfinished job of the flow; see JobQueueService.cancelFlow. */
  async cancel(id: string, reason: string | null): Promise<Flow> {
    const [flowId] = validateJobIds([id]);
    const audience = await this.audience.fresh();
    if (audience === null) await this.db.run('cancelFlow', [flowId, reason]);
    else {
      // The jobs cancelled here, not by a worker's release (which publishes its own), are heard
      // as job:cancelled from the cancel's own transaction (a failure destroys the connection).
      await onBorrowedConnection(this.db.pool, async (client) => {
        await client.query('begin');
        await this.db.runOn(client, 'cancelFlow', [flowId, reason]);
        await this.db.runOn(client, 'publishFlowCancelled', [flowId, audience]);
        await client.query('commit');
      });
    }
    const flow = await this.get(flowId);
    if (!flow) throw new JobQueueError('JQ_FLOW_NOT_FOUND', `flow ${flowId} does not exist`);
    return flow;
  }

  /** Completes jobs no worker holds, with `result`; see JobQueueService.completeJobs. */
  async complete(ids: string[], options: { result?: unknown; manager?: EntityManager }): Promise<Job[]> {
    const jobIds = validateJobIds(ids);
    const { result, manager = this.ambient.manager() } = options ?? {};
    checkManager(manager, this.db.dataSource);
    const resultJson = toJsonText(result, 'completeJobs: result', this.options.maxJsonBytes, { notJson: 'JQ_RESULT_NOT_JSON', tooLarge: 'JQ_RESULT_TOO_LARGE' }, 'null');
    let rows: Array<{ id: string }>;
    try {
      rows = await this.db.run<{ id: string }>('completeJobsWithResult', [jobIds, resultJson === 'null' ? null : resultJson], manager);
    } catch (error) {
      const message = (error as { message?: string }).message ?? '';
      if (message.startsWith('JQ_JOB_RUNNING: ')) throw new JobQueueError('JQ_JOB_RUNNING', message.slice('JQ_JOB_RUNNING: '.length));
      throw error;
    }
    return this.jobsById(rows.map((row) => row.id), manager);
  }

  /** A handler's `ctx.dependencyResults()`: its direct dependencies by ref, as they ended (a failure it ignores left out). */
  async dependencyResults(jobId: string): Promise<Record<string, DependencyResult>> {
    const rows = await this.db.run<DependencyRow>('dependencyResults', [jobId]);
    const results: Record<string, DependencyResult> = {};
    for (const row of rows) {
      if (row.state === null || (row.policy === 'ignore' && row.state !== 'completed')) continue;
      results[row.ref] = row.state === 'completed' ? { state: row.state, result: row.result ?? undefined } : { state: row.state, error: row.error ?? undefined };
    }
    return results;
  }

  /** `ctx.continueWith()`'s job, checked when called: a flow's jobs take no jobKey and no group. */
  continuation(identifier: string, payload: unknown, spec: Omit<JobSpec, 'manager'> = {}): ValidJob {
    if (spec) checkFlowJobSpec(spec, `continueWith('${identifier}')`);
    return this.specs.validate(identifier, payload, spec ?? {});
  }

  /** Adds `next`, the continuation of job `jobId` held by `workerId`, in the transaction of `manager` that completes the job. False if the worker lost the job. */
  async continueJob(manager: EntityManager, workerId: string, jobId: string, next: ValidJob): Promise<boolean> {
    const values = [jobId, workerId, next.identifier, next.payloadJson, next.queueName, next.runAt, next.maxAttempts, next.priority, next.flags];
    return (await this.db.run('continueJob', values, manager)).length === 1;
  }

  /** The jobs with these ids as they are now, by id (ids are bigints: compared as such). */
  private async jobsById(ids: string[], manager?: EntityManager): Promise<Job[]> {
    return [...(await readJobs(this.db, ids, manager)).values()].sort((a, b) => compareJobIds(a.id, b.id));
  }

}

interface EdgeRow {
  job_id: string;
  dependency_ref: string;
  dependency_id: string;
  policy: FlowEdge['policy'];
  state: FlowEdge['state'];
}

const toEdge = (row: EdgeRow): FlowEdge => ({ jobId: row.job_id, dependencyRef: row.dependency_ref, dependencyId: row.dependency_id, policy: row.policy, state: row.state });

/** Each ref's result: its chain's last job's (a job added alone is keyed by its flow's id). */
function resultsByRef(flow: Flow): Record<string, unknown> {
  const results: Record<string, unknown> = {};
  for (const job of flow.jobs) results[job.flowRef ?? flow.flowId] = job.result;
  return results;
}

/** One step as add_flow() reads it: the checked job's fields, the payload as its JSON text. */
function stepJson(step: FlowStep, job: ValidJob): string {
  const fields: Record<string, unknown> = { ref: step.ref, identifier: job.identifier, dependsOn: step.dependsOn, onDependencyFailure: step.onDependencyFailure ?? 'fail' };
  if (job.queueName !== null) fields.queueName = job.queueName;
  if (job.runAt !== null) fields.runAt = job.runAt.toISOString();
  if (job.priority !== null) fields.priority = job.priority;
  if (job.maxAttempts !== null) fields.maxAttempts = job.maxAttempts;
  if (job.flags !== null) fields.flags = job.flags;
  return `${JSON.stringify(fields).slice(0, -1)},"payload":${job.payloadJson}}`;
}
