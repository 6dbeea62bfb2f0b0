import { Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import type { Subscription } from 'rxjs';
import { JobQueueError } from '../core/errors';
import { JOB_QUEUE_EVENT_TYPES, type JobQueueEvent, type JobQueueEventType } from '../core/events';
import { ON_JOB_EVENT_METADATA } from '../decorators/on-job-event.decorator';
import { ON_QUEUE_EVENT_METADATA, type OnQueueEventMetadata } from '../decorators/on-queue-event.decorator';
import { queueEventFilter, type QueueEvent, type QueueEventFilter } from '../core/queue-events';
import { QueueEventStream, type QueueEventSubscription } from '../events/queue-event-stream';
import { TASK_METADATA, type TaskMetadata } from '../decorators/task.decorator';
import { JobQueueEvents } from '../events/job-queue-events';
import { takeCronMetadata } from './cron-metadata';
import { decoratedMethods, singletonInstance } from './decorated-methods';
import { TaskRegistry, type TaskHandler } from './task-registry';

type Listener = { call: (event: JobQueueEvent) => unknown; location: string };
type QueueListener = { call: (event: QueueEvent) => unknown; location: string; filter: QueueEventFilter };

/**
 * Finds the library's decorated methods on every provider and controller (as @nestjs/schedule's
 * explorer finds @Cron): `@Task` methods go into the TaskRegistry, with their `@Cron`,
 * `@OnJobEvent` methods are subscribed to this process's event stream and `@OnQueueEvent`
 * methods to the cluster's (QueueEventStream) once the app has started.
 */
@Injectable()
export class JobQueueExplorer implements OnModuleInit, OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('JobQueueEvents');
  private subscription?: Subscription;
  private queueListeners: QueueListener[] = [];
  private queueSubscriptions: QueueEventSubscription[] = [];

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    private readonly registry: TaskRegistry,
    private readonly events: JobQueueEvents,
    private readonly queueEvents: QueueEventStream,
  ) {
    // Before any onModuleInit, so before @nestjs/schedule's explorer looks for @Cron methods.
    for (const { method } of this.methods<TaskMetadata>(TASK_METADATA)) takeCronMetadata(method);
    // At onModuleInit, or earlier if another provider's onModuleInit adds a job first (providers are all instantiated by then).
    registry.discoverWith(() => this.registerTasks());
  }

  onModuleInit(): void {
    this.registry.discover();
    this.queueListeners = this.findQueueListeners(); // a bad event type stops the app here
    // and so does a listener that could hear nothing (transactionPooling without listenUrl)
    const refused = this.queueListeners.length > 0 && this.queueEvents.refusal(`@OnQueueEvent on ${this.queueListeners[0].location}`);
    if (refused) throw refused;
  }

  async onApplicationBootstrap(): Promise<void> {
    this.queueSubscriptions = this.queueListeners.map(({ call, location, filter }) =>
      this.queueEvents.subscribe(filter, (event) => this.deliver(`@OnQueueEvent('${event.type}') on ${location}`, () => call(event))),
    );
    // the app has started once the cluster publishes what they want
    await Promise.all(this.queueSubscriptions.map((subscription) => subscription.ready));
    const listeners = this.eventListeners();
    if (listeners.size === 0) return;
    this.subscription = this.events.events$.subscribe((event) => {
      for (const { call, location } of listeners.get(event.type) ?? []) this.deliver(`@OnJobEvent('${event.type}') on ${location}`, () => call(event));
    });
  }

  onApplicationShutdown(): void {
    this.subscription?.unsubscribe();
    for (const subscription of this.queueSubscriptions) void subscription.unsubscribe();
  }

  /** Calls a listener; what it throws or rejects with is logged, and never reaches the emitter. */
  private deliver(listener: string, call: () => unknown): void {
    try {
      const result = call();
      if (result instanceof Promise) result.catch((error: unknown) => this.failed(listener, error));
    } catch (error) {
      this.failed(listener, error);
    }
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

  /** Every `@OnQueueEvent` method, with the filter of what it wants. */
  private findQueueListeners(): QueueListener[] {
    return [...this.methods<OnQueueEventMetadata>(ON_QUEUE_EVENT_METADATA)].map((found) => {
      const { meta, method, location } = found;
      const filter = queueEventFilter(meta.types, meta.tasks, `@OnQueueEvent on ${location}`);
      const instance = singletonInstance(found, () => new JobQueueError('JQ_INVALID_OPTIONS', `@OnQueueEvent on ${location}: listeners must be on singleton providers`));
      return { call: method.bind(instance) as (event: QueueEvent) => unknown, location, filter };
    });
  }

  private failed(listener: string, error: unknown): void {
    this.logger.error(`${listener} threw: ${error instanceof Error ? error.message : String(error)}`, error instanceof Error ? error.stack : undefined);
  }
}
