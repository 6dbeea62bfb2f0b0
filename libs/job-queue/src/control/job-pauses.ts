import { Inject, Injectable } from '@nestjs/common';
import { JobQueueError } from '../core/errors';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { LIMITS, optionalString, validateTaskIdentifier } from '../core/validate-job-spec';
import { JobQueueDatabase } from '../db/job-queue-database';
import { TaskRegistry } from '../discovery/task-registry';
import { knownTask } from './known-task';
import { toPausedEntry, type PausedEntry, type PausedRow } from './paused-entry';

/**
 * Pause and resume (JobQueueService's pauseQueue, resumeQueue, pauseTask, resumeTask,
 * listPaused): rows of the `pauses` table, written with a notification that every worker
 * hears (sql/pauses.ts). Input is checked before anything is written: a queue name as add()
 * checks it (JQ_INVALID_QUEUE_NAME), a task this app runs or lists in `externalTasks`, or '*'
 * (JQ_UNKNOWN_TASK), as add() requires. A resume takes any name, so that a pause of a task
 * since removed from the code can still be lifted.
 */
@Injectable()
export class JobPauses {
  constructor(
    private readonly db: JobQueueDatabase,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
    private readonly tasks: TaskRegistry,
  ) {}

  async pauseQueue(name: string): Promise<void> {
    await this.db.run('pause', ['queue', queueName(name)]);
  }

  async resumeQueue(name: string): Promise<void> {
    await this.db.run('resume', ['queue', queueName(name)]);
  }

  async pauseTask(identifier: string): Promise<void> {
    await this.db.run('pause', ['task', knownTask('pauseTask', identifier, this.tasks, this.options, true)]);
  }

  async resumeTask(identifier: string): Promise<void> {
    await this.db.run('resume', ['task', validateTaskIdentifier(identifier)]);
  }

  async listPaused(): Promise<PausedEntry[]> {
    return (await this.db.run<PausedRow>('listPaused', [])).map(toPausedEntry);
  }
}

/** A queue name as add() checks one (core/validate-job-spec.ts), here required. */
function queueName(name: unknown): string {
  const valid = optionalString(name, 'JQ_INVALID_QUEUE_NAME', 'queue name', LIMITS.queueNameLength);
  if (valid === null) throw new JobQueueError('JQ_INVALID_QUEUE_NAME', `queue name must be a non-empty string of at most ${LIMITS.queueNameLength} characters, got ${String(name)}`);
  return valid;
}
