import { Inject, Injectable } from '@nestjs/common';
import { checkLimitsOverride, mergeLimits, type EffectiveLimits, type StoredLimits, type TaskLimitsOverride } from '../core/limits';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { validateTaskIdentifier } from '../core/validate-job-spec';
import { JobQueueDatabase } from '../db/job-queue-database';
import { TaskRegistry } from '../discovery/task-registry';
import { knownTask } from './known-task';

/** A task's limits as listTaskLimits() reports them. */
export interface TaskLimitsEntry {
  task: string;
  /** What this app's `@Task` declares (`{}` for a task it does not run, or one with no limit). */
  declared: EffectiveLimits;
  /** What setTaskLimits stored over it, or null. */
  override: StoredLimits | null;
  /** What its claims follow: the declared limits with the override over them. */
  limits: EffectiveLimits;
}

/**
 * Limits at run time (JobQueueService's setTaskLimits, resetTaskLimits): a row of
 * `task_limits` per task, the limits it overrides, written with a notification that every
 * worker hears (sql/limits.ts); workers read it with the pauses (control/controls.ts). Input
 * is checked before anything is written: a task this app runs or lists in `externalTasks`
 * (JQ_UNKNOWN_TASK), and limits as the decorator's (JQ_INVALID_LIMIT). A reset takes any
 * name, so that the limits of a task since removed from the code can still be dropped.
 */
@Injectable()
export class JobLimits {
  constructor(
    private readonly db: JobQueueDatabase,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
    private readonly tasks: TaskRegistry,
  ) {}

  async setTaskLimits(identifier: string, limits: TaskLimitsOverride): Promise<void> {
    const task = knownTask('setTaskLimits', identifier, this.tasks, this.options, false);
    const stored = checkLimitsOverride(limits, `setTaskLimits('${task}')`);
    await this.db.run('setTaskLimits', [task, JSON.stringify(stored)]);
  }

  async resetTaskLimits(identifier: string): Promise<void> {
    await this.db.run('resetTaskLimits', [validateTaskIdentifier(identifier)]);
  }

  /** This app's tasks and those with limits set at run time, by name, with their limits. */
  async listTaskLimits(): Promise<TaskLimitsEntry[]> {
    const rows = await this.db.run<{ task_identifier: string; limits: StoredLimits }>('readTaskLimits', []);
    const overrides = new Map(rows.map((row) => [row.task_identifier, row.limits]));
    const names = [...new Set([...this.tasks.identifiers(), ...overrides.keys()])].sort();
    return names.map((task) => {
      const declared = this.tasks.get(task)?.limits ?? {};
      const override = overrides.get(task) ?? null;
      return { task, declared, override, limits: mergeLimits(declared, override ?? undefined) };
    });
  }
}
