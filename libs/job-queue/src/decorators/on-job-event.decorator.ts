import { SetMetadata } from '@nestjs/common';
import type { JobQueueEventType } from '../core/events';

export const ON_JOB_EVENT_METADATA = 'nestjs-job-queue:on-job-event';

/**
 * Calls the method with each worker event of these types (`job:failed`, `job:success`, …;
 * see JobQueueEvent), on any provider or controller, as `@OnWorkerEvent` does in
 * @nestjs/bullmq. The method may be async; what it throws or rejects with is logged, and
 * never reaches the worker. `worker.events$` remains for RxJS users.
 */
export function OnJobEvent(...types: [JobQueueEventType, ...JobQueueEventType[]]): MethodDecorator {
  return SetMetadata(ON_JOB_EVENT_METADATA, types);
}
