import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Injectable, Module, type DynamicModule, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import type { Client } from 'pg';
import type { Subscription } from 'rxjs';
import { JobQueueModule, JobQueueService, OnQueueEvent, type QueueEvent } from '../../libs/job-queue/src';
import { connect, createTestDatabase } from '../support/database';
import { NotificationRecorder } from '../support/notifications';
import { waitFor, waitForNoJobs } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses } from '../support/worker-processes';

const EVENTS_CHANNEL = 'job_queue:events';
const heard: QueueEvent[] = [];

@Injectable()
class EveryEvent {
  @OnQueueEvent()
  on(event: QueueEvent) {
    heard.push(event);
  }
}

const exportsHeard: QueueEvent[] = [];

@Injectable()
class ExportsOnly {
  @OnQueueEvent('job:completed', { tasks: ['scripted'] })
  on(event: QueueEvent) {
    exportsHeard.push(event);
  }
}

@Injectable()
class BadListener {
  @OnQueueEvent('job:exploded' as never)
  on() {}
}

/** A producer-only app (worker: false) with `listeners` among its providers. */
async function producerApp(url: string, listeners: Array<new (...args: never[]) => unknown>): Promise<INestApplicationContext> {
  @Module({})
  class Listeners {
    static register(): DynamicModule {
      return { module: Listeners, providers: listeners };
    }
  }
  @Module({
    imports: [TypeOrmModule.forRoot({ type: 'postgres', url, retryAttempts: 0 }), JobQueueModule.forRoot({ worker: false, externalTasks: '*' }), Listeners.register()],
  })
  class ProducerModule {}
  return NestFactory.createApplicationContext(ProducerModule, { logger: false });
}

/**
 * Cluster-wide events (@OnQueueEvent, queueEvents$): a producer-only app hears what happens
 * to jobs that two worker processes run, once each, in order per job; publishing costs
 * nothing while nobody listens.
 */
describe('queue events heard across processes', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let app: INestApplicationContext | undefined;

  before(async () => {
    db = await createTestDatabase('queue_events');
    sql = await connect(db.url);
    await sql.query('create table runs (job_id bigint not null, pid int not null, attempt int not null)');
    await sql.query('create table handler_go (job_id bigint not null)');
  });
  afterEach(async () => {
    await stopWorkerProcesses();
    await app?.close();
    app = undefined;
    heard.length = 0;
    exportsHeard.length = 0;
  });
  after(async () => {
    await sql.end();
    await db.drop();
  });

  const byJob = (events: QueueEvent[]) => {
    const sequences = new Map<string, string[]>();
    for (const event of events) sequences.set(event.jobId, [...(sequences.get(event.jobId) ?? []), event.type]);
    return sequences;
  };

  it('a producer-only app hears the completions (with results), retries, failures, progress and cancels of jobs two worker processes run: each once, in order per job', async () => {
    app = await producerApp(db.url, [EveryEvent]);
    const jobs = app.get(JobQueueService);
    const streamed: QueueEvent[] = [];
    const subscription: Subscription = jobs.queueEvents$.subscribe((event) => streamed.push(event));
    await startWorkerProcesses(2, { url: db.url, concurrency: 4 });
    try {
      const add = (payload: object, spec = {}) => jobs.add('scripted' as never, payload as never, spec as never);
      const succeed = await Promise.all(Array.from({ length: 20 }, (_, n) => add({ result: { n } })));
      const flaky = await Promise.all(Array.from({ length: 20 }, (_, n) => add({ result: n, fail: 1 })));
      const doomed = await Promise.all(Array.from({ length: 20 }, () => add({ fail: 5 }, { maxAttempts: 2 })));
      const progressing = await add({ progress: 50, result: 'done' });
      const cancelled = await add({}, { runAt: new Date(Date.now() + 3_600_000) });
      await jobs.cancelJob(cancelled.id, 'not needed');
      await waitFor('the progress event', () => heard.some((event) => event.type === 'job:progress'));
      await sql.query('insert into handler_go values ($1)', [progressing.id]);
      const ends = () => heard.filter((event) => ['job:completed', 'job:failed', 'job:cancelled'].includes(event.type)).length;
      await waitFor(() => `every job's end to be heard (${ends()} of 62)`, () => ends() === 62);
      await waitForNoJobs(sql);

      const sequences = byJob(heard);
      for (const job of succeed) assert.deepEqual(sequences.get(job.id), ['job:completed'], `job ${job.id}`);
      for (const job of flaky) assert.deepEqual(sequences.get(job.id), ['job:retrying', 'job:completed'], `job ${job.id}`);
      for (const job of doomed) assert.deepEqual(sequences.get(job.id), ['job:retrying', 'job:failed'], `job ${job.id}`);
      assert.deepEqual(sequences.get(progressing.id), ['job:progress', 'job:completed']);
      assert.deepEqual(sequences.get(cancelled.id), ['job:cancelled']);
      assert.equal(sequences.size, 62, 'no other job was heard of');

      const completed = new Map(heard.filter((e) => e.type === 'job:completed').map((e) => [e.jobId, e]));
      succeed.forEach((job, n) => assert.deepEqual((completed.get(job.id) as { result: unknown }).result, { n }));
      flaky.forEach((job, n) => assert.equal((completed.get(job.id) as { result: unknown }).result, n));
      const retry = heard.find((e) => e.type === 'job:retrying' && e.jobId === flaky[0].id)!;
      assert.ok(retry.type === 'job:retrying');
      assert.equal(retry.error, 'attempt 1 failed');
      assert.equal(retry.attempts, 1);
      assert.ok(retry.retryAt instanceof Date && retry.at instanceof Date && retry.createdAt instanceof Date);
      const failed = heard.find((e) => e.jobId === doomed[0].id && e.type === 'job:failed')!;
      assert.deepEqual([failed.type === 'job:failed' && failed.error, failed.attempts, failed.maxAttempts, failed.taskIdentifier], ['attempt 2 failed', 2, 2, 'scripted']);
      const cancel = heard.find((e) => e.jobId === cancelled.id)!;
      assert.equal(cancel.type === 'job:cancelled' && cancel.reason, 'not needed');
      const progress = heard.find((e) => e.jobId === progressing.id)!;
      assert.equal(progress.type === 'job:progress' && progress.progress, 50);

      // queueEvents$ heard the same, in the same order per job
      await waitFor('queueEvents$ to hear as much', () => streamed.length === heard.length);
      assert.deepEqual(byJob(streamed), sequences);
    } finally {
      subscription.unsubscribe();
    }
  });

  it("cancelFlow's cancels are heard once each: its blocked and waiting jobs' from the cancel, the running one's from its worker", async () => {
    app = await producerApp(db.url, [EveryEvent]);
    const jobs = app.get(JobQueueService);
    await startWorkerProcesses(1, { url: db.url, concurrency: 4 });
    const step = (ref: string, payload: object, extra: object = {}) => ({ ref, identifier: 'scripted', payload, ...extra });
    const flow = await jobs.addFlow([
      step('running', { progress: 50 }),
      step('blocked', {}, { dependsOn: ['running'] }),
      step('later', {}, { runAt: new Date(Date.now() + 3_600_000) }),
    ] as never);
    const ids = Object.fromEntries(Object.entries(flow.jobs).map(([ref, job]) => [ref, job.id]));
    await waitFor('the running job to report progress', () => heard.some((event) => event.jobId === ids.running && event.type === 'job:progress'));
    await jobs.cancelFlow(flow.flowId, 'flow not needed');
    await sql.query('insert into handler_go values ($1)', [ids.running]);
    await waitFor('the flow to be heard cancelled', () => heard.some((event) => event.type === 'flow:cancelled'));
    // a job's completion heard after: every notification committed before it was heard first
    const sentinel = await jobs.add('scripted' as never, {} as never);
    await waitFor("the sentinel's completion", () => heard.some((event) => event.jobId === sentinel.id && event.type === 'job:completed'));

    const sequences = byJob(heard.filter((event) => event.type.startsWith('job:'))); // flow:cancelled names the flow's first job
    assert.deepEqual(sequences.get(ids.running), ['job:progress', 'job:cancelled']);
    assert.deepEqual(sequences.get(ids.blocked), ['job:cancelled']);
    assert.deepEqual(sequences.get(ids.later), ['job:cancelled']);
    for (const ref of ['blocked', 'later']) {
      const cancel = heard.find((event) => event.jobId === ids[ref])!;
      assert.equal(cancel.type === 'job:cancelled' && cancel.reason, 'flow not needed', ref);
    }
  });

  it('nothing is published while nobody listens; a late subscriber hears only later jobs; once it leaves, publishing stops', async () => {
    const recorder = await NotificationRecorder.listen(db.url, EVENTS_CHANNEL);
    try {
      await startWorkerProcesses(2, { url: db.url, concurrency: 4 });
      app = await producerApp(db.url, []);
      const jobs = app.get(JobQueueService);
      const add = () => jobs.add('scripted' as never, { result: 1 } as never);
      const early = await Promise.all(Array.from({ length: 20 }, add));
      await waitForNoJobs(sql);
      assert.deepEqual(await recorder.barrier(), [], 'no notification while nobody listens');

      const streamed: QueueEvent[] = [];
      const subscription = jobs.queueEvents$.subscribe((event) => streamed.push(event));
      // subscribing takes effect once the listener's row is in and the workers have read it
      const marker = () => streamed.some((event) => event.type === 'job:completed');
      while (!marker()) {
        await add();
        await waitForNoJobs(sql);
        await recorder.barrier();
      }
      const later = await Promise.all(Array.from({ length: 20 }, add));
      await waitFor('the later jobs to be heard', () => later.every((job) => streamed.some((event) => event.jobId === job.id)));
      assert.equal(streamed.filter((event) => early.some((job) => job.id === event.jobId)).length, 0, 'nothing of the jobs before it subscribed');

      subscription.unsubscribe();
      await waitFor('the listener to leave', async () => (await sql.query('select count(*)::int as n from job_queue.event_listeners')).rows[0].n === 0);
      // the workers hear that it left (a NOTIFY in its delete's transaction) and read the listeners again
      for (let quiet = false; !quiet; ) {
        await add();
        await waitForNoJobs(sql);
        quiet = (await recorder.barrier()).length === 0;
      }
      await Promise.all(Array.from({ length: 20 }, add));
      await waitForNoJobs(sql);
      assert.deepEqual(await recorder.barrier(), [], 'no notification once it left');
    } finally {
      await recorder.end();
    }
  });

  it('a listener of one task\'s completions gets only those published; a result too big for a notification arrives without it, flagged', async () => {
    const recorder = await NotificationRecorder.listen(db.url, EVENTS_CHANNEL);
    try {
      app = await producerApp(db.url, [ExportsOnly]);
      await startWorkerProcesses(1, { url: db.url, concurrency: 4 });
      const jobs = app.get(JobQueueService);
      const big = await jobs.add('scripted' as never, { result: 'x'.repeat(9000) } as never);
      const fits = await jobs.add('scripted' as never, { result: 'y'.repeat(5000) } as never);
      await jobs.add('noop' as never, {} as never);
      await jobs.add('scripted' as never, { fail: 1 } as never);
      await waitFor('both big results to be heard', () => exportsHeard.filter((e) => e.jobId === big.id || e.jobId === fits.id).length === 2);
      await waitForNoJobs(sql);
      // the wire format: core/queue-events.ts
      const published = (await recorder.barrier()).flatMap((payload) => (JSON.parse(payload) as { events: string[][] }).events);
      assert.deepEqual(new Set(published.map(([type, , task]) => `${type} ${task}`)), new Set(['job:completed scripted']), 'only what the listener wants');

      const bigEvent = exportsHeard.find((e) => e.jobId === big.id) as QueueEvent & { result?: unknown; resultTruncated?: boolean };
      assert.equal(bigEvent.resultTruncated, true);
      assert.equal('result' in bigEvent, false);
      assert.equal((await jobs.getJob<unknown, string>(big.id))?.result?.length, 9000, 'getJob() reads it');
      const fitsEvent = exportsHeard.find((e) => e.jobId === fits.id) as QueueEvent & { result?: unknown; resultTruncated?: boolean };
      assert.equal(fitsEvent.result, 'y'.repeat(5000));
      assert.equal(fitsEvent.resultTruncated, undefined);
    } finally {
      await recorder.end();
    }
  });

  it('a killed worker\'s running job, rescued by the sweep, is heard retrying with JQ_WORKER_LOST', async () => {
    // the earlier tests' processes are gone; their lease and rows would hold up the sweep until their 20 s timeout
    await sql.query('delete from job_queue.leases; delete from job_queue.workers');
    app = await producerApp(db.url, [EveryEvent]);
    const env = { HEARTBEAT_INTERVAL: '250', WORKER_TIMEOUT: '2000' };
    const workers = await startWorkerProcesses(2, { url: db.url, concurrency: 2, env });
    const job = await app.get(JobQueueService).add('nap' as never, { ms: 600_000 } as never);
    let holder: string | undefined;
    await waitFor('a worker to start the job', async () => {
      holder = (await sql.query('select locked_by from job_queue.jobs where id = $1 and started_at is not null', [job.id])).rows[0]?.locked_by;
      return holder !== undefined;
    });
    await workers.find((worker) => worker.workerId === holder)!.kill();
    await waitFor('the rescue to be heard', () => heard.some((event) => event.jobId === job.id));
    const [event] = heard.filter((e) => e.jobId === job.id);
    assert.equal(event.type, 'job:retrying');
    assert.ok(event.type === 'job:retrying');
    assert.equal(event.code, 'JQ_WORKER_LOST');
    assert.match(event.error, /^JQ_WORKER_LOST: worker \S+ stopped heartbeating/);
    assert.equal(event.attempts, 1);
    await sql.query('delete from job_queue.jobs where id = $1', [job.id]);
  });

  it('an unknown event type stops the app at startup with JQ_INVALID_EVENT', async () => {
    await assert.rejects(producerApp(db.url, [BadListener]), { code: 'JQ_INVALID_EVENT', message: /'job:exploded' is no queue event/ });
  });
});
