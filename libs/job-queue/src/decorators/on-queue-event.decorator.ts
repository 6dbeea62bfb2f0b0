import { SetMetadata } from '@nestjs/common';
import type { QueueEventType } from '../core/queue-events';

export const ON_QUEUE_EVENT_METADATA = 'nestjs-job-queue:on-queue-event';

export interface OnQueueEventOptions {
  /** Only events of jobs of these tasks: the cluster publishes nothing else for this listener. */
  tasks?: string[];
}

/** What @OnQueueEvent stores: the types (none: every type) and the options. */
export interface OnQueueEventMetadata {
  types: string[];
  tasks?: string[];
}

/**
 * Calls the method with every cluster-wide event of these types (all of them when none is
 * given; see QueueEvent), whichever process ran the job, as `@OnQueueEvent` of
 * @nestjs/bullmq's QueueEventsListener does. It works in a producer-only app (`worker: false`)
 * too. At most once: events published while the app is down are not heard. The method may
 * be async; what it throws or rejects with is logged. For reactions that must happen, use a
 * job (or `@OnJobEvent` in the worker that ran it).
 *
 *   @OnQueueEvent('job:completed', { tasks: ['export'] })
 *   exported(event: QueueEventOf<'job:completed'>) { … }
 */
export function OnQueueEvent(...types: QueueEventType[]): MethodDecorator;
export function OnQueueEvent(...args: [...types: QueueEventType[], options: OnQueueEventOptions]): MethodDecorator;
export function OnQueueEvent(...args: Array<QueueEventType | OnQueueEventOptions>): MethodDecorator {
  const last = args[args.length - 1];
  const options = typeof last === 'object' ? last : {};
  const types = args.filter((arg): arg is QueueEventType => typeof arg !== 'object');
  return SetMetadata<string, OnQueueEventMetadata>(ON_QUEUE_EVENT_METADATA, { types, ...(options.tasks ? { tasks: options.tasks } : {}) });
}
