import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';

@Injectable()
class Known {
  @Task('known')
  async run() {}
}

/** A task declaring `rateLimit: value`, for startup checks. */
function rateLimited(value: unknown) {
  @Injectable()
  class RateLimited {
    async run() {}
  }
  Task('rate_limited', { rateLimit: value as never })(RateLimited.prototype, 'run', Object.getOwnPropertyDescriptor(RateLimited.prototype, 'run')!);
  return RateLimited;
}

/**
 * Bad limits are refused before anything is written (issue 27.7): a bad `rateLimit` stops the
 * app at startup, a bad setTaskLimits throws JQ_INVALID_LIMIT (or JQ_UNKNOWN_TASK) and leaves
 * `task_limits` as it was.
 */
describe('limits: bad input', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    db = await createTestDatabase('limits_input');
    sql = await connect(db.url);
    t = await createTestApp({ url: db.url, providers: [Known], jobQueue: { worker: false, externalTasks: ['elsewhere'] } });
  });
  after(async () => {
    await t?.close();
    await sql?.end();
    await db?.drop();
  });

  const badRates: unknown[] = [null, 5, 'often', [5, 1000], { max: 5 }, { per: '1s' }, { max: 0, per: '1s' }, { max: 1.5, per: '1s' }, { max: 5, per: 0 }, { max: 5, per: 'soon' }, { max: 5, per: '32d' }, { max: 5, per: '1s', burst: 2 }];
  for (const bad of badRates) {
    it(`rateLimit ${JSON.stringify(bad)}: JQ_INVALID_LIMIT at startup`, async () => {
      await assert.rejects(createTestApp({ url: db.url, providers: [rateLimited(bad)], jobQueue: { worker: false } }), { code: 'JQ_INVALID_LIMIT' });
    });
  }

  it('a good rateLimit starts, as ms or as a duration', async () => {
    for (const per of [1000, '1m']) {
      const app = await createTestApp({ url: db.url, providers: [rateLimited({ max: 100, per })], jobQueue: { worker: false } });
      await app.close();
    }
  });

  const badOverrides: unknown[] = [
    undefined,
    null,
    {},
    { globalConcurrency: 0 },
    { globalConcurrency: -1 },
    { globalConcurrency: 2.5 },
    { globalConcurrency: '3' },
    { rateLimit: { max: 0, per: '1s' } },
    { rateLimit: { max: 5, per: 'bogus' } },
    { rateLimit: 10 },
    { concurrency: 3 },
    { groupConcurrency: 0 },
    { groupConcurrency: 1.5 },
    { groupRateLimit: { max: 1 } },
    { groupRateLimit: { max: 1, per: '0s' } },
  ];
  for (const bad of badOverrides) {
    it(`setTaskLimits(known, ${JSON.stringify(bad)}): JQ_INVALID_LIMIT, nothing written`, async () => {
      await assert.rejects(t.jobs.setTaskLimits('known', bad as never), { code: 'JQ_INVALID_LIMIT' });
      assert.deepEqual((await sql.query('select * from job_queue.task_limits')).rows, []);
    });
  }

  it('setTaskLimits of a task this app does not know: JQ_UNKNOWN_TASK; one it lists in externalTasks is taken', async () => {
    await assert.rejects(t.jobs.setTaskLimits('nobody', { globalConcurrency: 1 }), { code: 'JQ_UNKNOWN_TASK' });
    await assert.rejects(t.jobs.setTaskLimits('*', { globalConcurrency: 1 }), { code: 'JQ_UNKNOWN_TASK' });
    assert.deepEqual((await sql.query('select * from job_queue.task_limits')).rows, []);
    await t.jobs.setTaskLimits('elsewhere', { globalConcurrency: 3 });
    await t.jobs.setTaskLimits('elsewhere', { rateLimit: { max: 10, per: '1m' } });
    await t.jobs.setTaskLimits('elsewhere', { groupConcurrency: 2, groupRateLimit: { max: 3, per: 1000 } });
    const { rows } = await sql.query('select task_identifier, limits from job_queue.task_limits');
    assert.deepEqual(
      rows,
      [{ task_identifier: 'elsewhere', limits: { globalConcurrency: 3, rateLimit: { max: 10, perMs: 60_000 }, groupConcurrency: 2, groupRateLimit: { max: 3, perMs: 1000 } } }],
      'later calls add to the first',
    );
    const listed = (await t.jobs.listTaskLimits()).find((entry) => entry.task === 'elsewhere');
    assert.deepEqual(listed?.limits, { concurrency: 3, rate: { max: 10, perMs: 60_000 }, groupConcurrency: 2, groupRate: { max: 3, perMs: 1000 } });
    await t.jobs.resetTaskLimits('elsewhere');
    assert.deepEqual((await sql.query('select * from job_queue.task_limits')).rows, []);
  });
});
