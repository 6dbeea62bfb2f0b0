import {
  context,
  createNoopMeter,
  metrics,
  propagation,
  ProxyTracer,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type BatchObservableCallback,
  type Counter,
  type Histogram,
  type Link,
  type Meter,
  type ObservableGauge,
  type Tracer,
} from '@opentelemetry/api';
import type { JobQueueDatabase } from '../db/job-queue-database';
import type { Job } from '../core/job';
import type { JobQueueEvent } from '../core/events';
import type { JobOutcome } from '../core/job-outcome';
import type { TelemetryBridge, TraceCarrier } from './telemetry-bridge';

/** The instrumentation scope, and `messaging.system` (a custom system, as the conventions allow). */
export const TELEMETRY_NAME = 'nestjs-job-queue';
const SYSTEM = 'nestjs_job_queue';
/** How long a reading of the startable jobs serves the gauges (a collection reads both). */
const GAUGE_CACHE_MS = 1_000;

/** What a ProxyTracerProvider hands spans to until an SDK registers a tracer provider: the API's no-op one. */
const NOOP_TRACER_PROVIDER = new ProxyTracerProvider().getDelegate();

/** A function a context manager's bind() would wrap: the no-op manager gives it back as it is. */
const unbound = () => undefined;

/** The destination of a job, as the messaging conventions name it: its named queue, else its task. */
function destination(identifier: string, queueName: string | null): string {
  return queueName ?? identifier;
}

function errorType(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string') return code;
  return error instanceof Error ? error.constructor.name : '_OTHER';
}

/**
 * Traces and metrics through @opentelemetry/api, following OpenTelemetry's messaging semantic
 * conventions: a producer span `send <destination>` per add() or addMany() whose context is
 * stored with the jobs, and a consumer span `process <destination>` per attempt, linked to it;
 * `messaging.process.duration` per attempt; counters of jobs completed, failed for good and
 * retried; gauges of the jobs a worker could start now and the age of the oldest. Without an SDK
 * the API hands out no-op spans and instruments, and nothing is stored with the jobs; an
 * attempt then skips the span altogether (tracing()), and events are not counted.
 */
export class OpenTelemetryBridge implements TelemetryBridge {
  private readonly tracerProvider = trace.getTracerProvider();
  private readonly tracer: Tracer = this.tracerProvider.getTracer(TELEMETRY_NAME); // as trace.getTracer() does
  private readonly meter: Meter = metrics.getMeter(TELEMETRY_NAME);
  /**
   * A meter got while no SDK had registered a meter provider stays a no-op for good (the API
   * has no proxy for meters): then record() has nothing to do.
   */
  readonly counting = this.meter !== createNoopMeter();
  private readonly duration: Histogram;
  private readonly completed: Counter;
  private readonly failed: Counter;
  private readonly retried: Counter;
  private readonly gauges: [ObservableGauge, ObservableGauge];
  private startable?: Promise<{ count: number; oldestAge: number } | undefined>;
  private startableAt = 0;

  constructor(private readonly db: JobQueueDatabase) {
    this.duration = this.meter.createHistogram('messaging.process.duration', {
      description: 'Duration of one attempt of a job: its handler run',
      unit: 's',
    });
    this.completed = this.meter.createCounter('job_queue.jobs.completed', { description: 'Jobs completed', unit: '{job}' });
    this.failed = this.meter.createCounter('job_queue.jobs.failed', { description: 'Jobs that failed for good (no attempt left)', unit: '{job}' });
    this.retried = this.meter.createCounter('job_queue.jobs.retried', { description: 'Failed attempts that will be retried', unit: '{job}' });
    const depth = this.meter.createObservableGauge('job_queue.queue.depth', { description: 'Jobs a worker could start now and none has taken', unit: '{job}' });
    const age = this.meter.createObservableGauge('job_queue.queue.oldest_due_age', { description: 'How long the oldest job a worker could start now has been due', unit: 's' });
    this.gauges = [depth, age];
    this.meter.addBatchObservableCallback(this.observeStartable, this.gauges);
  }

  close(): void {
    this.meter.removeBatchObservableCallback(this.observeStartable, this.gauges);
  }

  private readonly observeStartable: BatchObservableCallback = async (observer) => {
    const startable = await this.readStartable();
    if (!startable) return;
    const [depth, age] = this.gauges;
    observer.observe(depth, startable.count, { 'messaging.system': SYSTEM });
    observer.observe(age, startable.oldestAge, { 'messaging.system': SYSTEM });
  };

  async traceAdd(
    destinations: Array<{ identifier: string; queueName: string | null }>,
    operation: 'add' | 'addMany' | 'addFlow',
    add: (carrier: TraceCarrier | null) => Promise<Job[]>,
  ): Promise<Job[]> {
    // No SDK and no context manager: the span would be a no-op and nothing would be injected.
    if (!this.tracing()) return add(null);
    const names = [...new Set(destinations.map((d) => destination(d.identifier, d.queueName)))];
    const name = names.length === 1 ? names[0] : '(many)';
    const attributes: Attributes = {
      'messaging.system': SYSTEM,
      'messaging.operation.type': 'send',
      'messaging.operation.name': operation,
      'messaging.destination.name': name,
    };
    if (operation === 'addMany') attributes['messaging.batch.message_count'] = destinations.length;
    const span = this.tracer.startSpan(`send ${name}`, { kind: SpanKind.PRODUCER, attributes });
    const carrier: TraceCarrier = {};
    propagation.inject(trace.setSpan(context.active(), span), carrier);
    try {
      const jobs = await context.with(trace.setSpan(context.active(), span), () => add(carrier.traceparent ? carrier : null));
      if (jobs.length === 1) span.setAttribute('messaging.message.id', jobs[0].id);
      return jobs;
    } catch (error) {
      span.recordException(error as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
      span.setAttribute('error.type', errorType(error));
      throw error;
    } finally {
      span.end();
    }
  }

  traceAttempt(job: Job, run: () => Promise<JobOutcome>): Promise<JobOutcome> {
    // As in an app without @opentelemetry/api: its span would be a no-op that no one sees.
    return this.tracing() ? this.traceAttemptInSpan(job, run) : run();
  }

  /**
   * Whether a span can matter, asked per add and per attempt (an SDK may register later):
   * false while our tracer still hands its spans to the API's no-op tracer (no SDK registered
   * a tracer provider) and no context manager would carry the span into the handler (a
   * no-op span there could still be seen as the active span).
   */
  private tracing(): boolean {
    if (!(this.tracer instanceof ProxyTracer && this.tracerProvider instanceof ProxyTracerProvider)) return true;
    return this.tracerProvider.getDelegate() !== NOOP_TRACER_PROVIDER || context.bind(ROOT_CONTEXT, unbound) !== unbound;
  }

  private async traceAttemptInSpan(job: Job, run: () => Promise<JobOutcome>): Promise<JobOutcome> {
    const links: Link[] = [];
    if (job.traceContext) {
      const producer = trace.getSpanContext(propagation.extract(context.active(), job.traceContext));
      if (producer) links.push({ context: producer });
    }
    const name = destination(job.taskIdentifier, job.queueName);
    const span = this.tracer.startSpan(`process ${name}`, {
      kind: SpanKind.CONSUMER,
      links,
      attributes: {
        'messaging.system': SYSTEM,
        'messaging.operation.type': 'process',
        'messaging.operation.name': 'process',
        'messaging.destination.name': name,
        'messaging.message.id': job.id,
        'job_queue.task': job.taskIdentifier,
        'job_queue.attempt': job.attempts,
        'job_queue.max_attempts': job.maxAttempts,
      },
    });
    const outcome = await context.with(trace.setSpan(context.active(), span), run);
    if (!outcome.ok) {
      if (outcome.error instanceof Error) span.recordException(outcome.error);
      span.setAttribute('error.type', errorType(outcome.error));
      span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error instanceof Error ? outcome.error.message : String(outcome.error) });
    }
    span.end();
    return outcome;
  }

  record(event: JobQueueEvent): void {
    if (!this.counting) return;
    if (event.type !== 'job:success' && event.type !== 'job:error' && event.type !== 'job:failed') return;
    const { job, durationMs } = event;
    const attributes: Attributes = {
      'messaging.system': SYSTEM,
      'messaging.operation.name': 'process',
      'messaging.destination.name': destination(job.taskIdentifier, job.queueName),
      'job_queue.task': job.taskIdentifier,
    };
    if (event.type === 'job:success') {
      this.completed.add(1, attributes);
      this.duration.record(durationMs / 1000, attributes);
      return;
    }
    const failedAttributes = { ...attributes, 'error.type': errorType(event.error) };
    this.duration.record(durationMs / 1000, failedAttributes);
    (event.type === 'job:failed' ? this.failed : this.retried).add(1, attributes);
  }

  /**
   * The jobs a worker could start now, as the claim and the health indicator see them
   * (startableJobs: a named queue counts only its head, and only while no job of it runs), so
   * that a queue waiting by design (behind a running job, or a head's retry) is no backlog.
   * Read at most once a second however many gauges ask.
   */
  private readStartable(): Promise<{ count: number; oldestAge: number } | undefined> {
    if (!this.startable || Date.now() - this.startableAt > GAUGE_CACHE_MS) {
      this.startableAt = Date.now();
      this.startable = this.db
        .run<{ count: number; oldest_age: number | null }>('startableJobs', [])
        .then(([row]) => ({ count: row.count, oldestAge: row.oldest_age ?? 0 }))
        .catch(() => undefined); // the database is away: no reading rather than a wrong one
    }
    return this.startable;
  }
}
