import { Logger } from '@nestjs/common';
import type { JobContext } from '../core/job-context';
import type { Job } from '../core/job';
import type { JobMiddleware } from '../core/middleware';
import type { EntityManager } from 'typeorm';
import { JobQueueError } from '../core/errors';
import { TaskRateLimited } from '../core/handler-outcomes';
import type { ValidJob } from '../core/validate-job-spec';
import { AttemptSteps, type StepStore } from './durable-steps';

/*
 * The contexts of one attempt, made per job. Not object literals with getters: V8 makes each
 * such literal a dictionary-mode object through runtime calls (0.5 to 0.9 µs apiece in a
 * loop); with the two a job had, a drain took 6 of its 20 µs of Node CPU per job more.
 */

/** What the worker (or runTask) gives a handler besides its job. */
export interface RunJobContext {
  signal: AbortSignal;
  addJob: JobContext['addJob'];
  progress: JobContext['progress'];
  /** A flow's calls; without them (runTask), no dependency, and continueWith refuses. */
  dependencyResults?: JobContext['dependencyResults'];
  continueWith?: JobContext['continueWith'];
  middleware?: readonly JobMiddleware[];
  /** The attempt's transaction, for a `transaction: true` task. */
  manager?: EntityManager;
  /** Where ctx.step() keeps its results (the worker's job_steps, runTask's memory). */
  steps: StepStore;
}

/** What the handler context's getters read: the job, the worker's context, the logger once made, the steps once one ran. */
interface Lazy {
  job: Job;
  context: RunJobContext;
  logger?: Logger;
  steps?: AttemptSteps;
  step?: JobContext['step'];
}

const LAZY = Symbol('lazy');
type WithLazy = { [LAZY]: Lazy };

// Shared by every context, so that they all keep one hidden class (fast properties). Both are
// made on first use: most handlers use neither (RunningJob.signal).
const LOGGER: PropertyDescriptor = {
  get(this: WithLazy) {
    const lazy = this[LAZY];
    return (lazy.logger ??= new Logger(`${lazy.job.taskIdentifier}#${lazy.job.id}`));
  },
  enumerable: true,
  configurable: true,
};
const SIGNAL: PropertyDescriptor = {
  get(this: WithLazy) {
    return this[LAZY].context.signal;
  },
  enumerable: true,
  configurable: true,
};

// ctx.step: made on first use, bound to its attempt (a handler may pass it around unbound).
const STEP: PropertyDescriptor = {
  get(this: WithLazy) {
    const lazy = this[LAZY];
    return (lazy.step ??= ((name: string, fn: unknown, options?: unknown) =>
      (lazy.steps ??= new AttemptSteps(lazy.job, lazy.context.steps)).run(name, fn, options)) as JobContext['step']);
  },
  enumerable: true,
  configurable: true,
};

// ctx.dependencyResults and ctx.continueWith: the attempt's, made when read (most handlers never do).
const DEPENDENCY_RESULTS: PropertyDescriptor = {
  get(this: WithLazy) {
    return this[LAZY].context.dependencyResults ?? NO_DEPENDENCIES;
  },
  enumerable: true,
  configurable: true,
};
const CONTINUE_WITH: PropertyDescriptor = {
  get(this: WithLazy) {
    return this[LAZY].context.continueWith ?? NO_CONTINUATION;
  },
  enumerable: true,
  configurable: true,
};

// ctx.rateLimited: made when read, bound to its task.
const RATE_LIMITED: PropertyDescriptor = {
  get(this: WithLazy) {
    const task = this[LAZY].job.taskIdentifier;
    return (retryAfter: number | string): never => {
      throw new TaskRateLimited(task, retryAfter);
    };
  },
  enumerable: true,
  configurable: true,
};

const NO_DEPENDENCIES: JobContext['dependencyResults'] = async () => ({});
const NO_CONTINUATION: JobContext['continueWith'] = () => {
  throw new JobQueueError('JQ_INVALID_FLOW', 'continueWith needs a worker: this attempt has no job row to continue');
};

/** What the worker's flow calls need of one attempt (worker/executor.ts fills it). */
export interface AttemptFlow {
  dependencyResults(jobId: string): ReturnType<JobContext['dependencyResults']>;
  /** Checks the continuation and keeps it on the attempt; throws if it has one already. */
  continueWith(entry: { continuation?: ValidJob }, identifier: string, payload?: unknown, spec?: object): void;
}

/**
 * The handler's `ctx`: a plain object of data properties (made in one literal), and `logger`,
 * `signal`, `dependencyResults`, `continueWith` and `step` as its own enumerable getters (a
 * spread of it copies them) that make what they return on first read: most handlers read none
 * of them, and a closure or two per job was a measurable part of a drain (docs/benchmark.md).
 * What the getters read is under a symbol that is not enumerable. What they return works
 * unbound (a handler may destructure them); what steps need (the names used, the results
 * recorded) is made at the first call of `step`.
 */
export function handlerContext(job: Job, context: RunJobContext): JobContext {
  const lazy: Lazy = { job, context };
  // Every data property in the literal, so that V8 lays them all out in the object at once.
  const ctx = {
    job: {
      id: job.id,
      taskIdentifier: job.taskIdentifier,
      attempts: job.attempts,
      maxAttempts: job.maxAttempts,
      queueName: job.queueName,
      group: job.group,
      key: job.key,
      runAt: job.runAt,
      flags: job.flags,
      createdAt: job.createdAt,
      flowId: job.flowId,
      flowRef: job.flowRef,
    },
    addJob: context.addJob,
    progress: context.progress,
    manager: context.manager,
  } as JobContext;
  Object.defineProperty(ctx, LAZY, { value: lazy });
  Object.defineProperty(ctx, 'logger', LOGGER);
  Object.defineProperty(ctx, 'signal', SIGNAL);
  Object.defineProperty(ctx, 'dependencyResults', DEPENDENCY_RESULTS);
  Object.defineProperty(ctx, 'continueWith', CONTINUE_WITH);
  Object.defineProperty(ctx, 'step', STEP);
  Object.defineProperty(ctx, 'rateLimited', RATE_LIMITED);
  return ctx;
}

/** The worker's context of one attempt: its signal is its running job's, read (and so made) only when the handler first asks. */
export class WorkerAttemptContext implements RunJobContext {
  constructor(
    private readonly running: { readonly signal: AbortSignal; readonly job: Job; continuation?: ValidJob },
    readonly addJob: JobContext['addJob'],
    readonly progress: JobContext['progress'],
    readonly middleware: readonly JobMiddleware[] | undefined,
    private readonly flow: AttemptFlow,
    readonly steps: StepStore,
  ) {}

  // Made when read (handlerContext reads them once): no closure per job in the constructor.
  get dependencyResults(): JobContext['dependencyResults'] {
    const { flow, running } = this;
    return () => flow.dependencyResults(running.job.id);
  }

  get continueWith(): JobContext['continueWith'] {
    const { flow, running } = this;
    return ((identifier: string, payload?: unknown, spec?: object) => flow.continueWith(running, identifier, payload, spec)) as JobContext['continueWith'];
  }

  get signal(): AbortSignal {
    return this.running.signal;
  }
}
