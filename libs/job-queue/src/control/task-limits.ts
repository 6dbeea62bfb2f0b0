import { hasLimits, mergeLimits, type EffectiveLimits } from '../core/limits';
import type { TaskRegistry } from '../discovery/task-registry';
import type { Controls } from './controls';

/**
 * What a worker knows of its tasks' limits: the decorator's (`globalConcurrency`, `rateLimit`,
 * checked at startup by the task registry) with what setTaskLimits stored over them (read with
 * the pauses: control/controls.ts). Limited tasks leave the general claim's tasks ($1 of sql
 * claimJobs), as paused ones do, and are claimed one by one by a claim of their own that counts
 * what the limits allow (sql/limits.ts, worker/limited-claim.ts). With no limited task the
 * general claim gets the array it was given: unlimited tasks pay nothing. Local starts
 * (service/local-start.ts) skip limited tasks.
 */
export class TaskLimits {
  private limits: ReadonlyMap<string, EffectiveLimits> = new Map();
  /** The controls' revision `limits` was derived at. */
  private derivedAt = -1;

  constructor(
    private readonly tasks: TaskRegistry,
    private readonly controls: Controls,
  ) {}

  /** The task's limits, or undefined when it has none. */
  limitsOf(task: string): EffectiveLimits | undefined {
    return this.byTask().get(task);
  }

  /** The limits the task declares in code (`@Task` options), which its claim merges with what is set at run time. */
  declaredOf(task: string): EffectiveLimits {
    return this.tasks.get(task)?.limits ?? {};
  }

  /** Whether the task's claims are limited. */
  isLimited(task: string): boolean {
    return this.byTask().has(task);
  }

  /** Splits the claim's tasks: `unlimited` (the same array when no task is limited) for the general claim, `limited` for their own claims. */
  split(identifiers: string[]): { unlimited: string[]; limited: string[] } {
    const limits = this.byTask();
    if (limits.size === 0) return { unlimited: identifiers, limited: [] };
    return { unlimited: identifiers.filter((task) => !limits.has(task)), limited: identifiers.filter((task) => limits.has(task)) };
  }

  private byTask(): ReadonlyMap<string, EffectiveLimits> {
    if (this.derivedAt === this.controls.revision) return this.limits;
    this.derivedAt = this.controls.revision;
    const limits = new Map<string, EffectiveLimits>();
    for (const task of this.tasks.all()) {
      const merged = mergeLimits(task.limits, this.controls.overrideOf(task.identifier));
      if (hasLimits(merged)) limits.set(task.identifier, merged);
    }
    this.limits = limits;
    return limits;
  }
}
