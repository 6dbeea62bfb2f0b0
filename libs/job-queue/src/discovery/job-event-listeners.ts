import { Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import type { Subscription } from 'rxjs';
import { decoratedMethods, singletonInstance } from './decorated-methods';
import { ON_JOB_EVENT_METADATA } from '../decorators/on-job-event.decorator';
import { JobQueueError } from '../core/errors';
import { JOB_QUEUE_EVENT_TYPES, type JobQueueEvent, type JobQueueEventType } from '../core/events';
import { JobQueueEvents } from '../events/job-queue-events';

/** Subscribes every `@OnJobEvent` method to the worker's events, once the app has started. */
@Injectable()
export class JobEventListeners implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('JobQueueEvents');
  private subscription?: Subscription;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    private readonly events: JobQueueEvents,
  ) {}

  onApplicationBootstrap(): void {
    const listeners = new Map<JobQueueEventType, Array<{ call: (event: JobQueueEvent) => unknown; location: string }>>();
    for (const found of decoratedMethods<JobQueueEventType[]>(this.discovery, this.scanner, this.reflector, ON_JOB_EVENT_METADATA)) {
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

  private failed(location: string, event: JobQueueEvent, error: unknown): void {
    this.logger.error(`@OnJobEvent('${event.type}') on ${location} threw: ${error instanceof Error ? error.message : String(error)}`, error instanceof Error ? error.stack : undefined);
  }
}
