import { Injectable, Logger } from '@nestjs/common';
import { Subject, type Observable } from 'rxjs';
import type { JobQueueEvent } from '../core/events';
import { errorMessage } from '../core/job-outcome';
import { JobQueueTelemetry } from '../telemetry/job-queue-telemetry';

/** Where a failed query or connection happened, as a worker:error event says. */
export type ErrorDuring = Extract<JobQueueEvent, { type: 'worker:error' }>['during'];

/**
 * The event stream of this process: jobs starting, succeeding, failing; the worker starting,
 * stopping, erring; cron and maintenance. The worker, the cron scheduler and maintenance
 * emit here; `@OnJobEvent` listeners, `JobQueueWorker.events$` and telemetry's counters hear it.
 */
@Injectable()
export class JobQueueEvents {
  private readonly logger = new Logger('JobQueueWorker');
  private readonly subject = new Subject<JobQueueEvent>();
  readonly events$: Observable<JobQueueEvent> = this.subject.asObservable();

  constructor(private readonly telemetry: JobQueueTelemetry) {}

  /**
   * Whether an event reaches anyone: a subscriber of events$ (@OnJobEvent listeners are one),
   * or telemetry's counters. The events every job has (start, success, complete) are built
   * only then: most apps listen to none, and they were three objects per job.
   */
  get heard(): boolean {
    return this.subject.observed || this.telemetry.counting;
  }

  emit(event: JobQueueEvent): void {
    this.telemetry.record(event);
    this.subject.next(event);
  }

  /** Logs a failed query or connection of worker `workerId` (the caller retries) and emits it as a worker:error event. */
  reportError(workerId: string, during: ErrorDuring, error: unknown): void {
    this.logger.warn(`${during} failed, retrying: ${errorMessage(error)}`);
    this.emit({ type: 'worker:error', workerId, during, error });
  }
}
