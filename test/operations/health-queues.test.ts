import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Controller, Get, Injectable } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { JobQueueHealthIndicator } from '../../libs/job-queue/src/terminus';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { connect } from '../support/database';
import { waitFor, waitForValue } from '../support/wait';

/** Released by the test: the long job of queue `serial` runs until then. */
let releaseLongJob: () => void = () => undefined;

@Injectable()
class QueueTasks {
  /** A named queue's head that fails, retried in an hour: the queue waits for it by design. */
  @Task('sync_crm', { queueName: 'crm', maxAttempts: 5, retryDelay: () => 3_600_000 })
  syncCrm() {
    throw new Error('CRM unavailable');
  }

  /** The first job of queue `serial` runs until the test releases it; the others return at once. */
  @Task('step', { queueName: 'serial' })
  async step(payload: { long?: boolean }, _ctx: JobContext) {
    if (payload.long) await new Promise<void>((resolve) => (releaseLongJob = resolve));
  }
}

@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly jobQueue: JobQueueHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.jobQueue.isHealthy('jobQueue', { maxDueAge: '1s' })]);
  }
}

interface HealthBody {
  details: { jobQueue: { status: string; message?: string; dueJobs: number | null } };
}

/**
 * What the health indicator must not call a backlog (named queues waiting as designed), and
 * a fault it must see: heartbeats that stop answering.
 */
describe('health indicator: named queues and heartbeats', () => {
  let ctx: TestAppContext;
  const get = async () => {
    const response = await fetch(`${ctx.t.url}/health`);
    return { status: response.status, body: (await response.json()) as HealthBody };
  };
  /** Waits until the jobs matching `where` have been due for longer than maxDueAge (1 s). */
  const olderThanMaxDueAge = (what: string, where: string) =>
    waitFor(what, async () => (await ctx.sql.query(`select bool_and(now() - run_at > interval '1.5 s') as old from job_queue.jobs where ${where}`)).rows[0].old === true);

  before(async () => {
    ctx = await openTestApp('health_queues', {
      providers: [QueueTasks, JobQueueHealthIndicator],
      imports: [TerminusModule],
      http: { controllers: [HealthController] },
      jobQueue: { heartbeatInterval: 200, pollInterval: 200 },
    });
  });
  after(() => {
    releaseLongJob();
    return closeTestApp(ctx);
  });

  it('up while a queue waits for its head to be retried, with a job due behind it', async () => {
    const [head] = await ctx.t.jobs.addMany([{ identifier: 'sync_crm', payload: {} }, { identifier: 'sync_crm', payload: {} }]);
    await waitForValue(ctx.sql, 'the head of crm to fail once', 'select attempts from job_queue.jobs where id = $1', 1, [head.id]);
    await olderThanMaxDueAge('the job behind the head to be due for longer than maxDueAge', `queue_name = 'crm' and attempts = 0`);
    const { status, body } = await get();
    assert.equal(status, 200, body.details.jobQueue.message);
    assert.equal(body.details.jobQueue.dueJobs, 0);
  });

  it('up while a queue runs a long job, with jobs due behind it', async () => {
    const [long] = await ctx.t.jobs.addMany([{ identifier: 'step', payload: { long: true } }, { identifier: 'step', payload: {} }, { identifier: 'step', payload: {} }]);
    await waitForValue(ctx.sql, 'the long job to start', 'select count(*)::int from job_queue.jobs where id = $1 and started_at is not null', 1, [long.id]);
    await olderThanMaxDueAge('the jobs behind it to be due for longer than maxDueAge', `queue_name = 'serial' and locked_at is null`);
    const { status, body } = await get();
    assert.equal(status, 200, body.details.jobQueue.message);
    releaseLongJob();
    await waitForValue(ctx.sql, 'queue serial to drain', `select count(*)::int from job_queue.jobs where queue_name = 'serial'`, 0);
  });

  it("down while the worker's heartbeats get no answer; up again once they do", async () => {
    // a transaction that holds the worker's row: its heartbeat (an update of that row) waits
    const holder = await connect(ctx.db.url);
    try {
      await holder.query('begin');
      await holder.query('select 1 from job_queue.workers where id = $1 for update', [ctx.t.worker.workerId]);
      await waitFor('the health check to report the silent heartbeats', async () => {
        const { status, body } = await get();
        return status === 503 && /last heartbeat was \d+ ms ago/.test(body.details.jobQueue.message ?? '');
      });
      await holder.query('commit');
    } finally {
      await holder.end();
    }
    await waitFor('the health check to be up again', async () => (await get()).status === 200);
  });
});
