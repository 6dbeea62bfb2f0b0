import { Inject, Injectable } from '@nestjs/common';
import { checkLimitsOverride, type TaskLimitsOverride } from '../core/limits';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { validateTaskIdentifier } from '../core/validate-job-spec';
import { JobQueueDatabase } from '../db/job-queue-database';
import { TaskRegistry } from '../discovery/task-registry';
import { knownTask } from './known-task';

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
}
