import '../support/hide-opentelemetry'; // first: before the library loads
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { JobQueueTelemetry } from '../../libs/job-queue/src/telemetry/job-queue-telemetry';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { countingTask } from '../support/tasks';
import { waitFor } from '../support/wait';

const { provider: Tasks, runs } = countingTask('work');

/** An app without @opentelemetry/api: the module starts, adds and runs jobs, and stores no trace context. */
describe('telemetry without @opentelemetry/api installed', () => {
  let ctx: TestAppContext;
  before(async () => {
    ctx = await openTestApp('telemetry_absent', { providers: [Tasks] });
  });
  after(() => closeTestApp(ctx));

  it('adds and runs jobs with telemetry off', async () => {
    assert.throws(() => require('@opentelemetry/api'), { code: 'MODULE_NOT_FOUND' });
    assert.equal(ctx.t.app.get(JobQueueTelemetry).enabled, false);
    const job = await ctx.t.jobs.add('work', {});
    assert.equal(job.traceContext, null);
    // the handler runs before its release is written: wait for the row
    await waitFor('the job to complete', async () => (await ctx.t.jobs.getJob(job.id))?.state === 'completed');
    assert.equal(runs.get(job.id), 1);
  });
});
