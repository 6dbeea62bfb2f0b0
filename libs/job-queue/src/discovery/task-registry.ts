import { Injectable, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { takeCronMetadata, type NestCronOptions } from './cron-metadata';
import { checkDuration } from '../core/duration';
import { JobQueueError } from '../core/errors';
import { validateJob } from '../core/validate-job-spec';
import { decoratedMethods, singletonInstance } from './decorated-methods';
import type { JobContext } from '../core/job-context';
import { TASK_METADATA, type TaskMetadata, type TaskOptions } from '../decorators/task.decorator';

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
}

/** Finds every `@Task` method at startup, with Nest's DiscoveryService. */
@Injectable()
export class TaskRegistry implements OnModuleInit {
  private readonly tasks = new Map<string, RegisteredTask>();
  private discovered = false;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
  ) {
    // Before any onModuleInit, so before @nestjs/schedule's explorer looks for @Cron methods.
    for (const { method } of this.taskMethods()) takeCronMetadata(method);
  }

  onModuleInit(): void {
    this.discover();
  }

  /**
   * Registers every @Task method, once: at onModuleInit, or earlier if another provider's
   * onModuleInit adds a job first (providers are all instantiated by then).
   */
  private discover(): void {
    if (this.discovered) return;
    this.discovered = true;
    for (const found of this.taskMethods()) {
      const { meta, location, method, methodName } = found;
      const cron = takeCronMetadata(method);
      const instance = singletonInstance(
        found,
        () =>
          new JobQueueError(
            cron ? 'JQ_REQUEST_SCOPED_CRON' : 'JQ_REQUEST_SCOPED_TASK',
            `@${cron ? 'Cron on @' : ''}Task('${meta.identifier}') on ${location}: tasks must be on singleton providers, not request- or transient-scoped ones`,
          ),
      ) as Record<string, TaskHandler>;
      // Looked up on the instance at each call rather than bound now: a test's spy on the
      // provider's method (jest.spyOn, vi.spyOn) sees the calls.
      this.register(meta, location, (payload, ctx) => instance[methodName](payload, ctx), cron);
    }
  }

  /** Every method carrying @Task, on providers and controllers (as @nestjs/schedule finds @Cron). */
  private taskMethods() {
    return decoratedMethods<TaskMetadata>(this.discovery, this.scanner, this.reflector, TASK_METADATA);
  }

  private register(meta: TaskMetadata, location: string, handler: TaskHandler, cron?: NestCronOptions): void {
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
