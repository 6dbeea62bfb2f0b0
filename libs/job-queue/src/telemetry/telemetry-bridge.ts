import type { Job } from '../core/job';
import type { JobQueueEvent } from '../core/events';
import type { JobOutcome } from '../core/job-outcome';

/** A W3C trace context carrier, as propagators fill it; its `traceparent` is stored with the jobs (trace-context.ts). */
export type TraceCarrier = Record<string, string>;

/** What the core asks of a telemetry backend (open-telemetry.ts is the one there is). */
export interface TelemetryBridge {
  /** Runs an add inside a producer span; `add` gets the context to store with the jobs, or null. */
  traceAdd(destinations: Array<{ identifier: string; queueName: string | null }>, operation: 'add' | 'addMany' | 'addFlow', add: (carrier: TraceCarrier | null) => Promise<Job[]>): Promise<Job[]>;
  /** Runs one attempt inside a consumer span linked to the job's producer span. */
  traceAttempt(job: Job, run: () => Promise<JobOutcome>): Promise<JobOutcome>;
  /** Counts a worker event (completions, failures, retries, durations). */
  record(event: JobQueueEvent): void;
  /** Whether record() counts anything (false for good when it was made without a meter provider). */
  readonly counting: boolean;
  /** Stops reading the database for gauges (the app is closing). */
  close(): void;
}
