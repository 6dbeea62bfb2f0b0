import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { JobQueueDatabase } from '../module/job-queue-database';
import { loadOptionalPeer } from '../module/optional-peer';
import type { Job } from '../service/job';
import type { JobQueueEvent } from '../worker/events';
import type { JobOutcome } from '../worker/run-job';

/** A W3C trace context carrier, as propagators fill it; its `traceparent` is stored with the jobs (trace-context.ts). */
export type TraceCarrier = Record<string, string>;

/** What the core asks of a telemetry backend (open-telemetry.ts is the one there is). */
export interface TelemetryBridge {
  /** Runs an add inside a producer span; `add` gets the context to store with the jobs, or null. */
  traceAdd(destinations: Array<{ identifier: string; queueName: string | null }>, operation: 'add' | 'addMany', add: (carrier: TraceCarrier | null) => Promise<Job[]>): Promise<Job[]>;
  /** Runs one attempt inside a consumer span linked to the job's producer span. */
  traceAttempt(job: Job, run: () => Promise<JobOutcome>): Promise<JobOutcome>;
  /** Counts a worker event (completions, failures, retries, durations). */
  record(event: JobQueueEvent): void;
  /** Whether record() counts anything (false for good when it was made without a meter provider). */
  readonly counting: boolean;
  /** Stops reading the database for gauges (the app is closing). */
  close(): void;
}

/**
 * Telemetry as the core sees it: OpenTelemetry when the app has `@opentelemetry/api` (loaded
 * here, not imported: the package is an optional peer) and `telemetry` is not false;
 * otherwise nothing, at the cost of one property read per add and per attempt.
 */
@Injectable()
export class JobQueueTelemetry implements OnApplicationShutdown {
  private readonly bridge?: TelemetryBridge;

  constructor(db: JobQueueDatabase) {
    if (!db.options.telemetry) return;
    if (!loadOptionalPeer('@opentelemetry/api')) return;
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

  traceAdd(destinations: Array<{ identifier: string; queueName: string | null }>, operation: 'add' | 'addMany', add: (carrier: TraceCarrier | null) => Promise<Job[]>): Promise<Job[]> {
    return this.bridge ? this.bridge.traceAdd(destinations, operation, add) : add(null);
  }

  traceAttempt(job: Job, run: () => Promise<JobOutcome>): Promise<JobOutcome> {
    return this.bridge ? this.bridge.traceAttempt(job, run) : run();
  }

  record(event: JobQueueEvent): void {
    this.bridge?.record(event);
  }
}
