import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { context, metrics, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { MeterProvider, MetricReader, type DataPoint, type Histogram } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { fromTraceColumns, toTraceColumns } from '../../libs/job-queue/src/core/trace-context';
import { closeTestApp, createTestApp, openTestApp, type TestAppContext } from '../support/app';
import { waitFor } from '../support/wait';

/** A reader the test collects from when it wants. */
class OnDemandReader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

const spans = new InMemorySpanExporter();
const reader = new OnDemandReader();
const appTracer = () => trace.getTracer('the-app');

@Injectable()
class TracedTasks {
  /** Starts a span of the app's own inside the handler: it must nest under the consumer span. */
  @Task('traced')
  traced() {
    appTracer().startActiveSpan('inside the handler', (span) => span.end());
    return { ok: true };
  }

  /** Fails its first attempt with a code, then completes. */
  @Task('flaky', { retryDelay: () => 0 })
  flaky(_payload: unknown, ctx: JobContext) {
    if (ctx.job.attempts === 1) throw Object.assign(new Error('first attempt fails'), { code: 'FLAKY' });
  }

  @Task('doomed', { maxAttempts: 1 })
  doomed() {
    throw new Error('never works');
  }
}

/**
 * OpenTelemetry with the SDK's in-memory exporters, registered globally before the app starts
 * (as an app's tracing set-up does): producer spans on add() whose context is stored in the
 * job row, consumer spans per attempt linked to them, the app's own spans nested in the
 * handler, and the counters, histogram and gauges.
 */
describe('telemetry (OpenTelemetry)', () => {
  let ctx: TestAppContext;

  before(async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
    ctx = await openTestApp('telemetry', { providers: [TracedTasks], jobQueue: { pollInterval: 100 } });
  });
  after(async () => {
    await closeTestApp(ctx);
    trace.disable();
    metrics.disable();
    propagation.disable();
    context.disable();
  });

  const finished = (id: string) => waitFor(`job ${id} to finish`, async () => (await ctx.t.jobs.getJob(id))?.finishedAt != null);
  const spansNamed = (name: string) => spans.getFinishedSpans().filter((span) => span.name === name);
  const traceparent = (span: ReadableSpan) => `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`;
  /** The points of one metric, by the task they are about. */
  const points = async (name: string) => {
    const { resourceMetrics } = await reader.collect();
    const metric = resourceMetrics.scopeMetrics.flatMap((scope) => scope.metrics).find((m) => m.descriptor.name === name);
    return (metric?.dataPoints ?? []) as Array<DataPoint<number | Histogram>>;
  };
  const byTask = async (name: string) => Object.fromEntries((await points(name)).map((p) => [p.attributes['job_queue.task'] as string, p.value]));

  it("add() inside the app's span: a producer span under it, stored with the job, linked from the consumer span, which the handler's spans nest under", async () => {
    const job = await appTracer().startActiveSpan('POST /orders', async (request) => {
      try {
        return await ctx.t.jobs.add('traced', { order: 1 });
      } finally {
        request.end();
      }
    });
    await finished(job.id);
    await waitFor('the consumer span to end', () => spansNamed('process traced').length === 1);

    const [request] = spansNamed('POST /orders');
    const [producer] = spansNamed('send traced');
    assert.equal(producer.kind, SpanKind.PRODUCER);
    assert.equal(producer.parentSpanContext?.spanId, request.spanContext().spanId, 'the producer span is a child of the request');
    assert.deepEqual(producer.attributes, {
      'messaging.system': 'nestjs_job_queue',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'add',
      'messaging.destination.name': 'traced',
      'messaging.message.id': job.id,
    });
    assert.deepEqual(job.traceContext, { traceparent: traceparent(producer) }, 'the job carries the producer span context');

    const [consumer] = spansNamed('process traced');
    assert.equal(consumer.kind, SpanKind.CONSUMER);
    assert.deepEqual(consumer.links.map((link) => link.context.spanId), [producer.spanContext().spanId], 'linked to the producer span');
    assert.notEqual(consumer.spanContext().traceId, producer.spanContext().traceId, 'a trace of its own (linked, not parented)');
    assert.equal(consumer.status.code, SpanStatusCode.UNSET);
    assert.deepEqual(
      [consumer.attributes['messaging.operation.type'], consumer.attributes['messaging.destination.name'], consumer.attributes['messaging.message.id'], consumer.attributes['job_queue.attempt']],
      ['process', 'traced', job.id, 1],
    );
    const [inside] = spansNamed('inside the handler');
    assert.equal(inside.parentSpanContext?.spanId, consumer.spanContext().spanId, "the handler's own span is a child of the consumer span");
  });

  it('the trace context is in the row while the job waits; addMany stores one producer context for all its jobs, keyed or not', async () => {
    const later = new Date(Date.now() + 3_600_000);
    const single = await appTracer().startActiveSpan('single', async (span) => (await ctx.t.jobs.add('traced', {}, { runAt: later }).finally(() => span.end())));
    const plain = await appTracer().startActiveSpan('many', async (span) =>
      ctx.t.jobs.addMany([{ identifier: 'traced', runAt: later }, { identifier: 'flaky', runAt: later, queueName: 'q' }]).finally(() => span.end()),
    );
    const keyed = await appTracer().startActiveSpan('many keyed', async (span) =>
      ctx.t.jobs.addMany([{ identifier: 'traced', runAt: later, jobKey: 'k1' }, { identifier: 'traced', runAt: later }]).finally(() => span.end()),
    );
    const stored = async (ids: string[]) =>
      (await ctx.sql.query(`select trace_id, span_id::text, trace_flags from job_queue.jobs where id = any($1::bigint[]) order by id`, [ids])).rows.map((row) =>
        fromTraceColumns(row.trace_id, row.span_id, row.trace_flags),
      );
    const producers = spansNamed('send traced').concat(spansNamed('send (many)')).filter((span) => span.endTime);
    const producerOf = (parent: string) => producers.find((span) => span.parentSpanContext?.spanId === spansNamed(parent)[0].spanContext().spanId)!;

    assert.deepEqual(await stored([single.id]), [{ traceparent: traceparent(producerOf('single')) }]);
    const many = producerOf('many');
    assert.equal(many.name, 'send (many)');
    assert.equal(many.attributes['messaging.batch.message_count'], 2);
    assert.deepEqual(await stored(plain.map((job) => job.id)), plain.map(() => ({ traceparent: traceparent(many) })));
    assert.deepEqual(await stored(keyed.map((job) => job.id)), keyed.map(() => ({ traceparent: traceparent(producerOf('many keyed')) })));
    for (const job of [single, ...plain, ...keyed]) await ctx.t.jobs.deleteJob(job.id);
  });

  it('a failed attempt: an error status with its code; the counters, the duration histogram and the gauges report the work done', async () => {
    const [flaky, doomed] = await ctx.t.jobs.addMany([{ identifier: 'flaky' }, { identifier: 'doomed' }]);
    await finished(flaky.id);
    await finished(doomed.id);
    await waitFor('the consumer spans to end', () => spansNamed('process flaky').length === 2 && spansNamed('process doomed').length === 1);
    const [first, second] = spansNamed('process flaky').sort((a, b) => Number(a.attributes['job_queue.attempt']) - Number(b.attributes['job_queue.attempt']));
    assert.deepEqual([first.status.code, first.attributes['error.type'], first.status.message], [SpanStatusCode.ERROR, 'FLAKY', 'first attempt fails']);
    assert.deepEqual(first.events.map((event) => event.name), ['exception']);
    assert.equal(second.status.code, SpanStatusCode.UNSET);
    assert.equal(spansNamed('process doomed')[0].attributes['error.type'], 'Error');

    await waitFor('the counters to count', async () => (await byTask('job_queue.jobs.completed')).flaky === 1);
    assert.deepEqual(await byTask('job_queue.jobs.completed'), { traced: 1, flaky: 1 });
    assert.deepEqual(await byTask('job_queue.jobs.retried'), { flaky: 1 });
    assert.deepEqual(await byTask('job_queue.jobs.failed'), { doomed: 1 });
    const durations = await points('messaging.process.duration');
    const count = (task: string) => durations.filter((p) => p.attributes['job_queue.task'] === task).reduce((sum, p) => sum + (p.value as Histogram).count, 0);
    assert.deepEqual([count('traced'), count('flaky'), count('doomed')], [1, 2, 1], 'one duration per attempt');

    // a due job nobody runs, waiting for a minute: the gauges see it
    await ctx.sql.query(`select job_queue.add_job('nobody_runs_this', run_at => now() - interval '1 minute')`);
    // (a reading serves the gauges for a second: the next ones see the job)
    await waitFor('the depth gauge to see the due job', async () => (await points('job_queue.queue.depth'))[0]?.value === 1);
    const [age] = await points('job_queue.queue.oldest_due_age');
    assert.ok((age.value as number) >= 60 && (age.value as number) < 120, `oldest due age ${age.value} s`);
  });

  it('the gauges count the jobs a worker could start now: not those behind a running job or behind a head waiting for its retry', async () => {
    await ctx.sql.query(`delete from job_queue.jobs where task_identifier = 'nobody_runs_this'`);
    // one transaction: a reading sees all of it or none
    await ctx.sql.query('begin');
    await ctx.sql.query(`insert into job_queue.workers (id, timeout_ms) values ('busy-worker', 3600000)`);
    await ctx.sql.query(`insert into job_queue.job_queues (queue_name, locked_at, locked_by) values ('held', null, null), ('busy', now(), 'busy-worker')`);
    await ctx.sql.query(
      `insert into job_queue.jobs (task_identifier, queue_name, run_at, attempts, first_run_at, locked_at, locked_by, started_at) values
         -- queue held: its head failed once and waits an hour for its retry; the job behind it has been due for 10 minutes
         ('nobody_runs_this', 'held', now() + interval '1 hour', 1, now() - interval '10 minutes', null, null, null),
         ('nobody_runs_this', 'held', now() - interval '10 minutes', 0, null, null, null, null),
         -- queue busy: a job runs in busy-worker; the one behind it has been due for 10 minutes
         ('nobody_runs_this', 'busy', now() - interval '20 minutes', 1, null, now(), 'busy-worker', now()),
         ('nobody_runs_this', 'busy', now() - interval '10 minutes', 0, null, null, null, null),
         -- a job anyone could start, due for 5 minutes
         ('nobody_runs_this', null, now() - interval '5 minutes', 0, null, null, null, null)`,
    );
    await ctx.sql.query('commit');
    // the unqueued job, due for 5 minutes, alone
    await waitFor('a reading of the gauges taken since', async () => ((await points('job_queue.queue.oldest_due_age'))[0]?.value as number) >= 300);
    const [[depth], [age]] = [await points('job_queue.queue.depth'), await points('job_queue.queue.oldest_due_age')];
    assert.equal(depth.value, 1, 'the startable jobs: neither queue has one');
    assert.ok((age.value as number) < 600, `the oldest startable job's age, not the jobs' behind the queues' heads: ${age.value} s`);
    await ctx.sql.query(`delete from job_queue.jobs where task_identifier = 'nobody_runs_this'`);
    await ctx.sql.query(`delete from job_queue.job_queues where queue_name in ('held', 'busy')`);
    await ctx.sql.query(`delete from job_queue.workers where id = 'busy-worker'`);
  });

  it('a traceparent survives the columns it is kept in, span ids with the high bit set included; an invalid one is not kept', () => {
    for (const span of ['ffffffffffffffff', '8000000000000000', '7fffffffffffffff', '0000000000000001']) {
      const traceparent = `00-4bf92f3577b34da6a3ce929d0e0e4736-${span}-01`;
      const columns = toTraceColumns({ traceparent })!;
      assert.deepEqual(fromTraceColumns(columns.traceId, columns.spanId, columns.flags), { traceparent });
    }
    for (const traceparent of ['00-00000000000000000000000000000000-0000000000000001-01', 'garbage', '01-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000001-01']) {
      assert.equal(toTraceColumns({ traceparent }), null);
    }
  });

  it('telemetry: false stores no trace context and makes no span', async () => {
    const off = await createTestApp({ url: ctx.db.url, jobQueue: { worker: false, externalTasks: '*', telemetry: false } });
    try {
      const before = spans.getFinishedSpans().length;
      const job = await appTracer().startActiveSpan('untraced', async (span) => off.jobs.add('anything', {}, { runAt: new Date(Date.now() + 3_600_000) }).finally(() => span.end()));
      assert.equal(job.traceContext, null);
      assert.deepEqual(spans.getFinishedSpans().slice(before).map((span) => span.name), ['untraced']);
      await off.jobs.deleteJob(job.id);
    } finally {
      await off.close();
    }
  });
});
