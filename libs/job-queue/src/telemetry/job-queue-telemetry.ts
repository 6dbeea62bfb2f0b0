import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { JobQueueDatabase } from '../db/job-queue-database';
import { loadOptionalPeer } from '../peers/optional-peer';
import type { Job } from '../core/job';
import type { JobQueueEvent } from '../core/events';
import type { JobOutcome } from '../core/job-outcome';
import type { TelemetryBridge, TraceCarrier } from './telemetry-bridge';

/**
 * Telemetry as the core sees it: OpenTelemetry when the app has `@opentelemetry/api` (loaded
 * here, not imported: the package is an optional peer) and `telemetry` is not false;
 * otherwise nothing, at the cost of one property read per add and per attempt.
 */
@Injectable()
export class JobQueueTelemetry implements OnApplicationShutdown {
  private readonly bridge?: TelemetryBridge;

  constructor(@Inject(JOB_QUEUE_OPTIONS) options: ResolvedJobQueueOptions, db: JobQueueDatabase) {
    if (!options.telemetry) return;
    if (!loadOptionalPeer('@opentelemetry/api')) return;
    // required here, not imported: it imports @opentelemetry/api
    const { OpenTelemetryBridge } = require('./open-telemetry') as typeof import('./open-telemetry');
    this.bridge = new OpenTelemetryBridge(db);
  }

  onApplicationShutdown(): void {
    this.bridge?.close();
  }

  get enabled(): boolean {
    return this.bridge !== undefined;
  }

  /** Whether record() counts events: the worker builds its per-job events only if they reach someone. */
  get counting(): boolean {
    return this.bridge?.counting ?? false;
  }

  traceAdd(destinations: Array<{ identifier: string; queueName: string | null }>, operation: 'add' | 'addMany' | 'addFlow', add: (carrier: TraceCarrier | null) => Promise<Job[]>): Promise<Job[]> {
    return this.bridge ? this.bridge.traceAdd(destinations, operation, add) : add(null);
  }

  traceAttempt(job: Job, run: () => Promise<JobOutcome>): Promise<JobOutcome> {
    return this.bridge ? this.bridge.traceAttempt(job, run) : run();
  }

  record(event: JobQueueEvent): void {
    this.bridge?.record(event);
  }
}
