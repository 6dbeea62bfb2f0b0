import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { JobQueueHealthIndicator } from '../../libs/job-queue/src/terminus';
import { closeTestApp, createTestApp, openTestApp, type TestApp, type TestAppContext } from '../support/app';
import { listenerPids } from '../support/connections';
import { connect, serverUrl } from '../support/database';
import { countingTask } from '../support/tasks';
import { waitFor } from '../support/wait';

const { provider: HealthTasks } = countingTask('work');

/** A readiness endpoint as an app writes one. */
@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly jobQueue: JobQueueHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.jobQueue.isHealthy('jobQueue', { maxDueAge: '30s', timeout: '2s' })]);
  }
}

interface HealthBody {
  status: string;
  details: { jobQueue: { status: string; message?: string; database: string; worker: Record<string, unknown> | string; dueJobs: number | null; oldestDueAgeMs: number | null } };
}

/**
 * JobQueueHealthIndicator through @nestjs/terminus over HTTP, with the faults it must see
 * caused for real: a due job nobody runs, the database refusing connections (the worker's
 * LISTEN connection terminated with the rest), and a producer-only app.
 */
describe('health indicator (@nestjs/terminus)', () => {
  let ctx: TestAppContext;
  const get = async (app: TestApp = ctx.t) => {
    const response = await fetch(`${app.url}/health`);
    return { status: response.status, body: (await response.json()) as HealthBody };
  };

  before(async () => {
    ctx = await openTestApp('health', {
      providers: [HealthTasks, JobQueueHealthIndicator],
      imports: [TerminusModule],
      http: { controllers: [HealthController] },
      jobQueue: { heartbeatInterval: 200, pollInterval: 200 },
    });
  });
  after(() => closeTestApp(ctx));

  it('up when the database answers, the worker listens and beats, and no due job waits too long', async () => {
    await ctx.t.jobs.add('work', {});
    await waitFor('the job to run', async () => (await ctx.t.jobs.countJobs()).byState.completed === 1);
    const { status, body } = await get();
    assert.equal(status, 200);
    assert.equal(body.status, 'ok');
    const health = body.details.jobQueue;
    assert.equal(health.status, 'up');
    assert.equal(health.database, 'up');
    assert.equal(health.dueJobs, 0);
    assert.deepEqual(
      { ...(health.worker as Record<string, unknown>), heartbeatAgeMs: typeof (health.worker as Record<string, unknown>).heartbeatAgeMs },
      { id: ctx.t.worker.workerId, running: true, listening: true, polling: false, heartbeatAgeMs: 'number', runningJobs: 0 },
    );
  });

  it('down while the oldest due job has waited longer than maxDueAge, up again once it is gone', async () => {
    const {
      rows: [job],
    } = await ctx.sql.query(`select id::text from job_queue.add_job('nobody_runs_this', run_at => now() - interval '1 minute')`);
    const { status, body } = await get();
    assert.equal(status, 503);
    assert.equal(body.details.jobQueue.status, 'down');
    assert.equal(body.details.jobQueue.dueJobs, 1);
    assert.ok(body.details.jobQueue.oldestDueAgeMs! >= 60_000);
    assert.match(body.details.jobQueue.message!, /the oldest due job has waited 6\d s \(more than 30 s\)/);
    await ctx.t.jobs.deleteJob(job.id);
    assert.equal((await get()).status, 200);
  });

  it('down while the database refuses connections and the LISTEN connection is lost; up again once it is back', async () => {
    const [listener] = await listenerPids(ctx.sql);
    assert.ok(listener, 'the worker listens');
    // from the server's own database: a database cannot refuse connections to itself
    const admin = await connect(serverUrl());
    try {
      await admin.query(`alter database "${ctx.db.name}" allow_connections false`);
      await admin.query('select pg_terminate_backend(pid, 10000) from pg_stat_activity where datname = $1', [ctx.db.name]);
      await waitFor('the health check to report the fault', async () => {
        const { status, body } = await get();
        return status === 503 && /database did not answer/.test(body.details.jobQueue.message ?? '') && /LISTEN connection/.test(body.details.jobQueue.message ?? '');
      });
      const { body } = await get();
      assert.equal(body.details.jobQueue.database, 'down');
      assert.equal((body.details.jobQueue.worker as Record<string, unknown>).listening, false);
    } finally {
      await admin.query(`alter database "${ctx.db.name}" allow_connections true`);
      await admin.end();
    }
    // the test's own client was cut too
    ctx.sql = await connect(ctx.db.url);
    await waitFor('the health check to be up again', async () => (await get()).status === 200, 20_000);
    const [again] = await listenerPids(ctx.sql);
    assert.ok(again && again !== listener, 'the worker listens on a new connection');
  });

  it('a producer-only app (worker: false) is up with its worker reported disabled', async () => {
    const producer = await createTestApp({
      url: ctx.db.url,
      providers: [JobQueueHealthIndicator],
      imports: [TerminusModule],
      http: { controllers: [HealthController] },
      jobQueue: { worker: false, externalTasks: '*' },
    });
    try {
      const { status, body } = await get(producer);
      assert.equal(status, 200);
      assert.equal(body.details.jobQueue.worker, 'disabled');
    } finally {
      await producer.close();
    }
  });
});
