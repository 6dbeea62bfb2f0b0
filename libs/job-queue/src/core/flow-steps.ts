import { JobQueueError } from './errors';
import type { Job, JobSpec } from './job';
import type { JobState } from './job-state';

/** What a dependent does when a dependency fails for good or is cancelled. */
export type DependencyFailurePolicy = 'fail' | 'ignore' | 'continue';

/** One step of `addFlow`: a job, named by `ref` in its flow, that runs once the steps it `dependsOn` have finished. */
export interface FlowStep extends Omit<JobSpec, 'manager' | 'jobKey' | 'jobKeyMode' | 'dedupeFor' | 'group'> {
  /** The step's name in its flow: unique in it, at most 128 characters. */
  ref: string;
  identifier: string;
  payload?: unknown;
  /** Refs of the steps this one waits for. None: it is claimable at once. */
  dependsOn?: string[];
  /**
   * When a dependency fails for good or is cancelled: `fail` (the default) fails this job with
   * JQ_DEPENDENCY_FAILED, and its own `fail` dependents after it; `ignore` runs it as if that
   * dependency had completed (its `dependencyResults()` leave it out); `continue` runs it, and
   * `dependencyResults()` show the failure. Either way it runs once all its dependencies ended.
   */
  onDependencyFailure?: DependencyFailurePolicy;
}

/** What `addFlow` returns: the flow's id (its first job's) and each step's job by ref. */
export interface AddedFlow {
  flowId: string;
  jobs: Record<string, Job>;
}

/** A flow as it is now (`getFlow`). */
export interface Flow {
  flowId: string;
  /** `running` while any job of it is unfinished; then `failed` or `cancelled` if a job failed or was cancelled that no dependent took in its stride (`ignore`, `continue`), else `completed`. */
  state: FlowState;
  /** Every job of the flow, continuations included, by id. */
  jobs: Job[];
  /** Who waits for whom: a job, the ref and job it waits for, its policy, and how that dependency ended (null while it has not). */
  edges: FlowEdge[];
}

export type FlowState = 'running' | 'completed' | 'failed' | 'cancelled';

export interface FlowEdge {
  jobId: string;
  dependencyRef: string;
  dependencyId: string;
  policy: DependencyFailurePolicy;
  state: Extract<JobState, 'completed' | 'failed' | 'cancelled'> | null;
}

/** What `ctx.dependencyResults()` gives for one direct dependency (by its ref), once every dependency ended. */
export interface DependencyResult<Result = unknown> {
  state: 'completed' | 'failed' | 'cancelled';
  /** The dependency's result (its chain's last job's) when completed. */
  result?: Result;
  /** Its last error when it failed or was cancelled. */
  error?: string;
}

/** The most steps one flow may have. */
export const MAX_FLOW_STEPS = 10_000;
const MAX_REF_LENGTH = 128;
const POLICIES: readonly DependencyFailurePolicy[] = ['fail', 'ignore', 'continue'];

const invalid = (message: string) => new JobQueueError('JQ_INVALID_FLOW', message);

/** A flow's jobs (addFlow's steps, ctx.continueWith's job) take no jobKey, and no group yet: JQ_INVALID_FLOW, naming `where`. */
export function checkFlowJobSpec(spec: object, where: string): void {
  if ('jobKey' in spec || 'jobKeyMode' in spec) throw invalid(`${where}: a flow's jobs take no jobKey`);
  if ('group' in spec) throw invalid(`${where}: a flow's jobs take no group (not supported yet)`);
}

/**
 * Checks a flow's shape (refs, dependencies, policies, no cycle) and returns its steps in an
 * order where each comes after all it depends on (the input order where that holds), with
 * `dependsOn` without repeats. The jobs themselves are checked by the caller.
 */
export function orderFlowSteps(steps: unknown): FlowStep[] {
  if (!Array.isArray(steps)) throw invalid('addFlow takes an array of steps');
  if (steps.length === 0) throw invalid('a flow needs at least one step');
  if (steps.length > MAX_FLOW_STEPS) throw invalid(`a flow has at most ${MAX_FLOW_STEPS} steps, got ${steps.length}`);
  const byRef = new Map<string, FlowStep>();
  for (const [index, step] of steps.entries()) {
    if (step === null || typeof step !== 'object') throw invalid(`step ${index} must be an object`);
    const { ref, dependsOn, onDependencyFailure } = step as FlowStep;
    if (typeof ref !== 'string' || ref.length === 0 || ref.length > MAX_REF_LENGTH) {
      throw invalid(`step ${index}: ref must be a non-empty string of at most ${MAX_REF_LENGTH} characters`);
    }
    if (byRef.has(ref)) throw invalid(`the ref '${ref}' is used by two steps`);
    checkFlowJobSpec(step, `step '${ref}'`);
    if (dependsOn !== undefined && (!Array.isArray(dependsOn) || dependsOn.some((d) => typeof d !== 'string'))) {
      throw invalid(`step '${ref}': dependsOn must be an array of refs`);
    }
    if (onDependencyFailure !== undefined && !POLICIES.includes(onDependencyFailure)) {
      throw invalid(`step '${ref}': onDependencyFailure must be one of ${POLICIES.join(', ')}, got ${JSON.stringify(onDependencyFailure)}`);
    }
    byRef.set(ref, { ...(step as FlowStep), dependsOn: dependsOn === undefined ? [] : [...new Set(dependsOn)] });
  }
  for (const step of byRef.values()) {
    for (const dependency of step.dependsOn!) {
      if (!byRef.has(dependency)) throw invalid(`step '${step.ref}' depends on '${dependency}', which is no step of the flow`);
      if (dependency === step.ref) throw invalid(`step '${step.ref}' depends on itself`);
    }
  }
  return topologicalOrder(byRef);
}

/** Kahn's order, taking ready steps in input order; a cycle is refused with its refs named. */
function topologicalOrder(byRef: Map<string, FlowStep>): FlowStep[] {
  const waiting = new Map<string, number>();
  const dependents = new Map<string, string[]>();
  for (const step of byRef.values()) {
    waiting.set(step.ref, step.dependsOn!.length);
    for (const dependency of step.dependsOn!) (dependents.get(dependency) ?? dependents.set(dependency, []).get(dependency)!).push(step.ref);
  }
  const ordered: FlowStep[] = [];
  const ready = [...byRef.keys()].filter((ref) => waiting.get(ref) === 0);
  for (let next = 0; next < ready.length; next++) {
    const ref = ready[next];
    ordered.push(byRef.get(ref)!);
    for (const dependent of dependents.get(ref) ?? []) {
      const left = waiting.get(dependent)! - 1;
      waiting.set(dependent, left);
      if (left === 0) ready.push(dependent);
    }
  }
  if (ordered.length === byRef.size) return ordered;
  throw invalid(`the flow has a cycle: ${findCycle(byRef, new Set(ordered.map((step) => step.ref))).join(' → ')}`);
}

/** One cycle among the steps Kahn's order could not place (each of them waits on another of them). */
function findCycle(byRef: Map<string, FlowStep>, placed: Set<string>): string[] {
  const start = [...byRef.keys()].find((ref) => !placed.has(ref))!;
  const path: string[] = [];
  const seen = new Map<string, number>();
  let ref = start;
  while (!seen.has(ref)) {
    seen.set(ref, path.length);
    path.push(ref);
    ref = byRef.get(ref)!.dependsOn!.find((dependency) => !placed.has(dependency))!;
  }
  const cycle = path.slice(seen.get(ref));
  return [...cycle, cycle[0]];
}
