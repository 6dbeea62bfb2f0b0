import type { EntityManager } from 'typeorm';
import { JobQueueError } from '../core/errors';
import type { Job } from '../core/job';
import { toJsonText } from '../core/json';
import type { JobQueueDatabase } from '../db/job-queue-database';

/** The longest step name, in characters (the job_steps check says the same). */
export const MAX_STEP_NAME_CHARS = 200;

/** What a store answers when asked to record a step: the result now recorded (JSON text; null for undefined), and whether this call recorded it. */
export interface RecordedStep {
  json: string | null;
  mine: boolean;
}

/**
 * Where the results of durable steps are kept: `job_steps` for the worker (DatabaseStepStore),
 * memory for runTask() of the testing helpers. One store serves every attempt (it is told the
 * job each time), so that an attempt that calls no step costs nothing.
 */
export interface StepStore {
  /** The module's `maxJsonBytes`: the largest result a step may record. */
  readonly maxJsonBytes: number;
  /** The steps earlier attempts of `job` recorded: JSON text by name, null for a step that returned undefined. */
  recorded(job: Job): Promise<Map<string, string | null>>;
  /**
   * Records `json` as the result of step `name`, in `manager`'s transaction when given,
   * unless another attempt of the job recorded that step first: then its result comes back,
   * with `mine` false. Throws JQ_WORKER_LOST when the job is no longer this attempt's.
   */
  record(job: Job, name: string, json: string | null, manager?: EntityManager): Promise<RecordedStep>;
  /** Runs `work` in a transaction of its own on the app's DataSource: committed once it resolves, rolled back if it throws. */
  transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T>;
}

/** The worker's store: `job_steps`, written only while the job's worker still holds it (sql/steps.ts). */
export class DatabaseStepStore implements StepStore {
  constructor(
    private readonly db: JobQueueDatabase,
    readonly maxJsonBytes: number,
  ) {}

  async recorded(job: Job): Promise<Map<string, string | null>> {
    const rows = await this.db.run<{ name: string; result: string | null }>('loadJobSteps', [job.id]);
    return new Map(rows.map((row) => [row.name, row.result]));
  }

  async record(job: Job, name: string, json: string | null, manager?: EntityManager): Promise<RecordedStep> {
    const [{ recorded }] = await this.db.run<{ recorded: number }>('recordJobStep', [job.id, name, json, job.lockedBy], manager);
    if (recorded === 1) return { json, mine: true };
    const [row] = await this.db.run<{ result: string | null }>('readJobStep', [job.id, name], manager);
    if (row) return { json: row.result, mine: false };
    throw new JobQueueError(
      'JQ_WORKER_LOST',
      `job ${job.id} (${job.taskIdentifier}) is no longer held by worker ${job.lockedBy}: step '${name}' was not recorded`,
    );
  }

  transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    return this.db.dataSource.transaction(work);
  }
}

/** Thrown inside a transactional step whose record another attempt wrote first: rolls back this run's writes. */
class RecordedElsewhere extends Error {
  constructor(readonly json: string | null) {
    super('step recorded by another attempt');
  }
}

/**
 * The durable steps of one attempt (`ctx.step()`), made at its first step: the names used in
 * this attempt, and what earlier attempts recorded, read once.
 */
export class AttemptSteps {
  private readonly names = new Set<string>();
  private done?: Promise<Map<string, string | null>>;

  constructor(
    private readonly job: Job,
    private readonly store: StepStore,
  ) {}

  async run(name: unknown, fn: unknown, options: unknown): Promise<unknown> {
    const { job, store } = this;
    const transaction = checkStep(job, name, fn, options);
    const step = name as string;
    if (this.names.has(step)) {
      throw new JobQueueError(
        'JQ_DUPLICATE_STEP',
        `step '${step}' was already called in this attempt of job ${job.id} (${job.taskIdentifier}): each step of a job needs a name of its own`,
      );
    }
    this.names.add(step);
    const done = await this.recorded();
    if (done.has(step)) return parsed(done.get(step)!);

    const what = `the result of step '${step}' of job ${job.id} (${job.taskIdentifier})`;
    const json = (value: unknown) =>
      value === undefined ? null : toJsonText(value, what, store.maxJsonBytes, { notJson: 'JQ_RESULT_NOT_JSON', tooLarge: 'JQ_RESULT_TOO_LARGE' }, 'null');
    if (!transaction) {
      const result = json(await (fn as () => unknown)());
      return parsed((await store.record(job, step, result)).json);
    }
    try {
      const result = await store.transaction(async (manager) => {
        const own = json(await (fn as (manager: EntityManager) => unknown)(manager));
        const recorded = await store.record(job, step, own, manager);
        if (!recorded.mine) throw new RecordedElsewhere(recorded.json);
        return own;
      });
      return parsed(result);
    } catch (error) {
      if (error instanceof RecordedElsewhere) return parsed(error.json);
      throw error;
    }
  }

  /** What earlier attempts recorded, read at the first step (read again after a failed read). */
  private recorded(): Promise<Map<string, string | null>> {
    return (this.done ??= this.store.recorded(this.job).catch((error: unknown) => {
      this.done = undefined;
      throw error;
    }));
  }
}

const parsed = (json: string | null): unknown => (json === null ? undefined : JSON.parse(json));

/** U+0000, or half of a UTF-16 surrogate pair. */
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Checks a step's arguments before anything runs (JQ_INVALID_STEP); returns whether it is transactional. */
function checkStep(job: Job, name: unknown, fn: unknown, options: unknown): boolean {
  const bad = (detail: string) => new JobQueueError('JQ_INVALID_STEP', `ctx.step() of job ${job.id} (${job.taskIdentifier}): ${detail}`);
  if (typeof name !== 'string' || name.length === 0 || name.length > MAX_STEP_NAME_CHARS) {
    throw bad(`the name must be a string of 1 to ${MAX_STEP_NAME_CHARS} characters, got ${typeof name === 'string' ? `${name.length} characters` : typeof name}`);
  }
  if (UNSTORABLE.test(name)) throw bad(`step '${name}': the name contains U+0000 or a lone UTF-16 surrogate, which PostgreSQL cannot store as they are`);
  if (typeof fn !== 'function') throw bad(`step '${name}' needs a function to run, got ${fn === null ? 'null' : typeof fn}`);
  if (options === undefined) return false;
  if (options === null || typeof options !== 'object') throw bad(`the options of step '${name}' must be an object, got ${options === null ? 'null' : typeof options}`);
  const { transaction } = options as { transaction?: unknown };
  if (transaction !== undefined && typeof transaction !== 'boolean') throw bad(`transaction must be a boolean, got ${typeof transaction}`);
  return transaction === true;
}
