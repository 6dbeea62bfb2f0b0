import type { DataSource, EntityManager } from 'typeorm';
import type { Job } from '../core/job';
import { toJsonText } from '../core/json';
import type { RecordedStep, StepStore } from '../worker/durable-steps';

/**
 * runTask()'s durable steps: kept in memory for one run (there is no job row to keep them
 * with), starting from the results a test says earlier attempts recorded. A transactional
 * step gets a real transaction on the app's DataSource, committed once the step returns.
 */
export class MemoryStepStore implements StepStore {
  /** Every step's result as JSON text by name (null: the step returned undefined), those given included. */
  readonly results = new Map<string, string | null>();

  constructor(
    given: Record<string, unknown> | undefined,
    private readonly dataSource: DataSource,
    readonly maxJsonBytes: number,
  ) {
    for (const [name, value] of Object.entries(given ?? {})) {
      const json = toJsonText(value, `runTask: the result given for step '${name}'`, maxJsonBytes, { notJson: 'JQ_RESULT_NOT_JSON', tooLarge: 'JQ_RESULT_TOO_LARGE' }, 'null');
      this.results.set(name, value === undefined ? null : json);
    }
  }

  async recorded(_job: Job): Promise<Map<string, string | null>> {
    return new Map(this.results);
  }

  async record(_job: Job, name: string, json: string | null): Promise<RecordedStep> {
    if (this.results.has(name)) return { json: this.results.get(name)!, mine: false };
    this.results.set(name, json);
    return { json, mine: true };
  }

  transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    return this.dataSource.transaction(work);
  }

  /** The results as values, by name (as a later attempt would get them back). */
  values(): Record<string, unknown> {
    return Object.fromEntries([...this.results].map(([name, json]) => [name, json === null ? undefined : JSON.parse(json)]));
  }
}
