import { Injectable } from '@nestjs/common';
import type { NestCronOptions } from './cron-metadata';
import { checkDuration } from '../core/duration';
import { JobQueueError } from '../core/errors';
import { checkDeclaredLimits, type EffectiveLimits } from '../core/limits';
import { validateJob } from '../core/validate-job-spec';
import type { JobContext } from '../core/job-context';
import type { TaskMetadata, TaskOptions } from '../decorators/task.decorator';


export type TaskHandler = (payload: unknown, ctx: JobContext) => unknown;

export interface RegisteredTask {
  identifier: string;
  options: TaskOptions;
  /** The method, bound to its provider. */
  handler: TaskHandler;
  /** `Class.method`, for messages. */
  location: string;
  /** `@Cron` options from @nestjs/schedule, when the method has both decorators. */
  cron?: NestCronOptions;
  /** The task's own `timeout`, in ms; the module's `jobTimeout` applies when it has none. */
  timeoutMs?: number;
  /** The task's `globalConcurrency`, `rateLimit`, `groupConcurrency` and `groupRateLimit`, checked (setTaskLimits may override them: control/task-limits.ts). */
  limits: EffectiveLimits;
}

/**
 * The tasks of this app, by identifier: what the worker runs and add() checks. JobQueueExplorer
 * fills it from the `@Task` methods it finds (discoverWith), once, before the first lookup.
 */
@Injectable()
export class TaskRegistry {
  private readonly tasks = new Map<string, RegisteredTask>();
  private discoverer?: () => void;

  /** How to find the tasks: run by discover(), once. */
  discoverWith(discoverer: () => void): void {
    this.discoverer = discoverer;
  }

  /** Finds the tasks, if they were not found yet. */
  discover(): void {
    const discoverer = this.discoverer;
    this.discoverer = undefined;
    discoverer?.();
  }

  register(meta: TaskMetadata, location: string, handler: TaskHandler, cron?: NestCronOptions): void {
    const where = `@Task('${String(meta.identifier)}') on ${location}`;
    try {
      const { maxAttempts, queueName, priority } = meta.options;
      validateJob(meta.identifier, undefined, { maxAttempts, queueName, priority });
    } catch (error) {
      JobQueueError.rethrowAt(where, error, 'JQ_INVALID_TASK_OPTIONS');
    }
    if (meta.options.retryDelay !== undefined && typeof meta.options.retryDelay !== 'function') {
      throw new JobQueueError('JQ_INVALID_TASK_OPTIONS', `${where}: retryDelay must be a function`);
    }
    if (meta.options.transaction !== undefined && typeof meta.options.transaction !== 'boolean') {
      throw new JobQueueError('JQ_INVALID_TASK_OPTIONS', `${where}: transaction must be true or false`);
    }
    const { timeout } = meta.options;
    const timeoutMs = timeout === undefined ? undefined : checkDuration('timeout', timeout, 1, 'JQ_INVALID_TASK_OPTIONS', where);
    const limits = checkDeclaredLimits(meta.options, where);
    const existing = this.tasks.get(meta.identifier);
    if (existing) {
      throw new JobQueueError(
        'JQ_DUPLICATE_TASK',
        `task '${meta.identifier}' has two handlers: ${existing.location} and ${location}`,
      );
    }
    this.tasks.set(meta.identifier, {
      identifier: meta.identifier,
      options: meta.options,
      handler,
      location,
      cron,
      timeoutMs,
      limits,
    });
  }

  get(identifier: string): RegisteredTask | undefined {
    this.discover();
    return this.tasks.get(identifier);
  }

  identifiers(): string[] {
    this.discover();
    return [...this.tasks.keys()];
  }

  all(): RegisteredTask[] {
    this.discover();
    return [...this.tasks.values()];
  }
}
