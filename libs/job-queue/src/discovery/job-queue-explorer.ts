import { Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import type { Subscription } from 'rxjs';
import { JobQueueError } from '../core/errors';
import { JOB_QUEUE_EVENT_TYPES, type JobQueueEvent, type JobQueueEventType } from '../core/events';
import { ON_JOB_EVENT_METADATA } from '../decorators/on-job-event.decorator';
import { TASK_METADATA, type TaskMetadata } from '../decorators/task.decorator';
import { JobQueueEvents } from '../events/job-queue-events';
import { takeCronMetadata } from './cron-metadata';
import { decoratedMethods, singletonInstance } from './decorated-methods';
import { TaskRegistry, type TaskHandler } from './task-registry';

type Listener = { call: (event: JobQueueEvent) => unknown; location: string };

/**
 * Finds the library's decorated methods on every provider and controller (as @nestjs/schedule's
 * explorer finds @Cron): `@Task` methods go into the TaskRegistry, with their `@Cron`, and
 * `@OnJobEvent` methods are subscribed to the event stream once the app has started.
 */
@Injectable()
export class JobQueueExplorer implements OnModuleInit, OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('JobQueueEvents');
  private subscription?: Subscription;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    private readonly registry: TaskRegistry,
    private readonly events: JobQueueEvents,
  ) {
    // Before any onModuleInit, so before @nestjs/schedule's explorer looks for @Cron methods.
    for (const { method } of this.methods<TaskMetadata>(TASK_METADATA)) takeCronMetadata(method);
    // At onModuleInit, or earlier if another provider's onModuleInit adds a job first (providers are all instantiated by then).
    registry.discoverWith(() => this.registerTasks());
  }

  onModuleInit(): void {
    this.registry.discover();
  }

  onApplicationBootstrap(): void {
    const listeners = this.eventListeners();
    if (listeners.size === 0) return;
    this.subscription = this.events.events$.subscribe((event) => {
      for (const { call, location } of listeners.get(event.type) ?? []) {
        try {
          const result = call(event);
          if (result instanceof Promise) result.catch((error: unknown) => this.failed(location, event, error));
        } catch (error) {
          this.failed(location, event, error);
        }
      }
    });
  }

  onApplicationShutdown(): void {
    this.subscription?.unsubscribe();
  }

  private methods<Meta>(key: string) {
    return decoratedMethods<Meta>(this.discovery, this.scanner, this.reflector, key);
  }

  private registerTasks(): void {
    for (const found of this.methods<TaskMetadata>(TASK_METADATA)) {
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
      this.registry.register(meta, location, (payload, ctx) => instance[methodName](payload, ctx), cron);
    }
  }

  /** Every `@OnJobEvent` method, by the event types it listens to. */
  private eventListeners(): Map<JobQueueEventType, Listener[]> {
    const listeners = new Map<JobQueueEventType, Listener[]>();
    for (const found of this.methods<JobQueueEventType[]>(ON_JOB_EVENT_METADATA)) {
      const { meta: types, method, location } = found;
      for (const type of types) {
        if (!JOB_QUEUE_EVENT_TYPES.includes(type)) {
          throw new JobQueueError('JQ_INVALID_OPTIONS', `@OnJobEvent('${String(type)}') on ${location}: no such event; one of ${JOB_QUEUE_EVENT_TYPES.join(', ')}`);
        }
        const instance = singletonInstance(found, () => new JobQueueError('JQ_INVALID_OPTIONS', `@OnJobEvent on ${location}: listeners must be on singleton providers`));
        const call = method.bind(instance) as (event: JobQueueEvent) => unknown;
        listeners.set(type, [...(listeners.get(type) ?? []), { call, location }]);
      }
    }
    return listeners;
  }

  private failed(location: string, event: JobQueueEvent, error: unknown): void {
    this.logger.error(`@OnJobEvent('${event.type}') on ${location} threw: ${error instanceof Error ? error.message : String(error)}`, error instanceof Error ? error.stack : undefined);
  }
}
