import { Injectable, type OnModuleInit, type Type } from '@nestjs/common';
import { JobQueueWorker, type JobQueueEvent } from '../../libs/job-queue/src';

/**
 * A provider that subscribes to the worker's events in onModuleInit, as an app would, so
 * that events emitted during bootstrap (startup backfill, a tick claimed while other
 * replicas are still booting) are recorded too.
 */
export function eventRecorder(into: JobQueueEvent[]): Type {
  @Injectable()
  class EventRecorder implements OnModuleInit {
    constructor(private readonly worker: JobQueueWorker) {}
    onModuleInit() {
      this.worker.events$.subscribe((event) => into.push(event));
    }
  }
  return EventRecorder;
}
