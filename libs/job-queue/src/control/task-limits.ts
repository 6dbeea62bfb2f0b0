import type { TaskRegistry } from '../discovery/task-registry';

/**
 * What a worker knows of its tasks' concurrency limits (`@Task(id, { globalConcurrency })`,
 * checked at startup by the task registry): which of the tasks a claim would take are limited.
 * Limited tasks leave the general claim's tasks ($1 of sql claimJobs), as paused ones do, and
 * are claimed one by one by a claim of their own that counts the jobs held (sql/limits.ts,
 * worker/limited-claim.ts). With no limited task the general claim gets the array it was given:
 * unlimited tasks pay nothing. Local starts (service/local-start.ts) skip limited tasks.
 */
export class TaskLimits {
  private limits?: ReadonlyMap<string, number>;

  constructor(private readonly tasks: TaskRegistry) {}

  /** The task's globalConcurrency, or undefined when it has none. */
  limitOf(task: string): number | undefined {
    return this.byTask().get(task);
  }

  /** Splits the claim's tasks: `unlimited` (the same array when no task is limited) for the general claim, `limited` for their own claims. */
  split(identifiers: string[]): { unlimited: string[]; limited: string[] } {
    const limits = this.byTask();
    if (limits.size === 0) return { unlimited: identifiers, limited: [] };
    return { unlimited: identifiers.filter((task) => !limits.has(task)), limited: identifiers.filter((task) => limits.has(task)) };
  }

  private byTask(): ReadonlyMap<string, number> {
    this.limits ??= new Map(this.tasks.all().flatMap((task) => (task.globalConcurrency === undefined ? [] : [[task.identifier, task.globalConcurrency] as const])));
    return this.limits;
  }
}
