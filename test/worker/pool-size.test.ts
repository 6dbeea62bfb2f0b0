import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { LoggerService } from '@nestjs/common';
import { Injectable } from '@nestjs/common';
import { Task } from '../../libs/job-queue/src';
import { CLAIMS_APPLICATION_NAME } from '../../libs/job-queue/src/worker/claim-connection';
import { createTestApp } from '../support/app';
import { createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

/** Keeps the warnings Nest logs. */
function warnings(): LoggerService & { seen: string[] } {
  const seen: string[] = [];
  return { seen, log() {}, error() {}, warn: (message: unknown) => void seen.push(String(message)) };
}

@Injectable()
class PoolTasks {
  @Task('pool_probe')
  run() {}
}

describe('the pool the worker shares with the app', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  before(async () => {
    db = await createTestDatabase('pool_size');
  });
  after(() => db.drop());

  it('too small for concurrency plus the queue\'s own connections: a warning at startup, with the numbers', async () => {
    const logger = warnings();
    const t = await createTestApp({ url: db.url, logger, typeOrm: { extra: { max: 10 } }, jobQueue: { concurrency: 10 } });
    await t.close();
    const pool = logger.seen.filter((m) => /database pool/.test(m));
    assert.equal(pool.length, 1, `one warning: ${logger.seen.join(' | ')}`);
    assert.match(pool[0], /has 10 connections, fewer than concurrency 10 \+ 3 .* = 13/);
  });

  it('no concurrency given: it fits the pool (pg\'s default of 10 runs 7 at once), with no warning', async () => {
    const logger = warnings();
    const t = await createTestApp({ url: db.url, logger, typeOrm: { extra: { max: 10 } } });
    const { rows } = await t.dataSource.query('select concurrency from job_queue.workers where id = $1', [t.worker.workerId]).then((rows: unknown[]) => ({ rows }));
    await t.close();
    assert.deepEqual(rows, [{ concurrency: 7 }]);
    assert.deepEqual(logger.seen.filter((m) => /database pool/.test(m)), []);
  });

  it('a pool of 2 or 3 still runs jobs (claims take a connection each time), with a warning; a pool of 4 keeps one for claims', async () => {
    for (const max of [2, 3, 4]) {
      const logger = warnings();
      const t = await createTestApp({ url: db.url, logger, typeOrm: { extra: { max } }, providers: [PoolTasks] });
      try {
        const job = await t.jobs.add('pool_probe', {});
        // (not waitForJob: its listener would take one more connection for good)
        await waitFor(`the job to complete, pool of ${max}`, async () => (await t.jobs.getJob(job.id))?.state === 'completed');
        const kept = await t.dataSource.query('select count(*)::int as n from pg_stat_activity where application_name = $1', [CLAIMS_APPLICATION_NAME]);
        assert.deepEqual(kept, [{ n: max === 4 ? 1 : 0 }], `pool of ${max}: a claim connection kept or not`);
        assert.equal(logger.seen.filter((m) => /database pool/.test(m)).length, max === 4 ? 0 : 1, `pool of ${max}: ${logger.seen.join(' | ')}`);
      } finally {
        await t.close();
      }
    }
  });

  it('large enough: no warning', async () => {
    const logger = warnings();
    const t = await createTestApp({ url: db.url, logger, typeOrm: { extra: { max: 13 } }, jobQueue: { concurrency: 10 } });
    await t.close();
    assert.deepEqual(logger.seen.filter((m) => /database pool/.test(m)), []);
  });
});
