import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { isJobQueueError, Task, type JobMiddleware } from '../../libs/job-queue/src';
import { runTask } from '../../libs/job-queue/src/testing';
import { closeTestApp, createTestApp, openTestApp, type TestAppContext } from '../support/app';
import { waitFor } from '../support/wait';

const trail: string[] = [];

@Injectable()
class Tasks {
  @Task('greet')
  greet(payload: { name: string }) {
    trail.push(`handler ${payload.name}`);
    return `hello ${payload.name}`;
  }

  @Task('guarded', { maxAttempts: 1 })
  guarded() {
    trail.push('guarded handler');
  }
}

/** Outermost: times and wraps the result. */
const outer: JobMiddleware = async (ctx, next) => {
  trail.push(`outer before ${ctx.task}#${ctx.job.id}`);
  const result = await next();
  trail.push('outer after');
  return { wrapped: result };
};

/** Inner: refuses one task, with a code, before its handler runs. */
const inner: JobMiddleware = async (ctx, next) => {
  trail.push(`inner before ${JSON.stringify(ctx.payload)}`);
  if (ctx.task === 'guarded') throw Object.assign(new Error('refused by middleware'), { code: 'APP_REFUSED' });
  const result = await next();
  trail.push('inner after');
  return result;
};

describe('job middleware', () => {
  let ctx: TestAppContext;
  before(async () => {
    ctx = await openTestApp('middleware', { providers: [Tasks], jobQueue: { middleware: [outer, inner], pollInterval: 100 } });
  });
  after(() => closeTestApp(ctx));

  const finished = async (id: string) => (await ctx.sql.query(`select state, result, last_error, errors from job_queue.finished_jobs where id = $1`, [id])).rows[0];

  it('wraps every handler in order, the first outermost, and what it returns is the result', async () => {
    trail.length = 0;
    const job = await ctx.t.jobs.add('greet', { name: 'ada' });
    await waitFor('the job to complete', async () => (await finished(job.id))?.state === 'completed');
    assert.deepEqual(trail, [`outer before greet#${job.id}`, 'inner before {"name":"ada"}', 'handler ada', 'inner after', 'outer after']);
    assert.deepEqual((await finished(job.id)).result, { wrapped: 'hello ada' });
  });

  it('a middleware that throws fails the attempt with its error, and the handler does not run', async () => {
    trail.length = 0;
    const job = await ctx.t.jobs.add('guarded', {});
    await waitFor('the job to fail', async () => (await finished(job.id))?.state === 'failed');
    const row = await finished(job.id);
    assert.deepEqual([row.last_error, row.errors[0].code], ['refused by middleware', 'APP_REFUSED']);
    assert.ok(!trail.includes('guarded handler'));
  });

  it('runTask goes through the same middleware', async () => {
    trail.length = 0;
    const run = await runTask(ctx.t.app, 'greet', { name: 'bob' });
    assert.deepEqual(run.result, { wrapped: 'hello bob' });
    assert.deepEqual(trail, ['outer before greet#0', 'inner before {"name":"bob"}', 'handler bob', 'inner after', 'outer after']);
  });

  it('middleware that is not a list of functions stops the app', async () => {
    await assert.rejects(
      createTestApp({ url: ctx.db.url, jobQueue: { middleware: ['nope'] as unknown as JobMiddleware[] } }),
      (error) => isJobQueueError(error, 'JQ_INVALID_OPTIONS'),
    );
  });
});
