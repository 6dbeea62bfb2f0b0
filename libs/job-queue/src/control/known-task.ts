import { JobQueueError } from '../core/errors';
import type { ResolvedJobQueueOptions } from '../core/options';
import { validateTaskIdentifier } from '../core/validate-job-spec';
import type { TaskRegistry } from '../discovery/task-registry';

/** pauseTask('*'): every task. */
export const ALL_TASKS = '*';

/**
 * A task a control call may name: one this app runs, one it lists in `externalTasks` (as add()
 * requires), or '*' where `all` allows it; anything else is JQ_UNKNOWN_TASK, before anything
 * is written.
 */
export function knownTask(call: string, identifier: unknown, tasks: TaskRegistry, options: ResolvedJobQueueOptions, all: boolean): string {
  const task = validateTaskIdentifier(identifier);
  if ((all && task === ALL_TASKS) || tasks.get(task)) return task;
  const { externalTasks } = options;
  if (externalTasks === '*' || externalTasks.has(task)) return task;
  throw new JobQueueError(
    'JQ_UNKNOWN_TASK',
    `${call}: no @Task('${task}') in this app: check the name, or list it in the externalTasks option if another app runs it${all ? " ('*' pauses every task)" : ''}`,
  );
}
