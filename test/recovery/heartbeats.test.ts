import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { DataSource } from 'typeorm';
import { Task, type JobQueueEvent } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { waitFor, waitForNoJobs } from '../support/wait';

@Injectable()
class HogTasks {
  constructor(private readonly dataSource: DataSource) {}

  /** Holds a pooled connection for 3 s, as a slow report would. */
  @Task('hog')
  async hog() {
    await this.dataSource.query('select pg_sleep(3)');
  }
}

/**
 * Handlers that take every connection of the pool for longer than workerTimeout: the
 * worker's heartbeats (and the leader's sweeps) use its pinned connection, so it stays
 * alive in the cluster's eyes, and nothing is rescued from under it.
 */
describe('heartbeats under a pool full of handlers', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  const events: JobQueueEvent[] = [];

  before(async () => {
    ({ db, sql, t } = await openTestApp('heartbeats', {
      providers: [HogTasks],
      typeOrm: { extra: { max: 4 } },
      jobQueue: { concurrency: 8, heartbeatInterval: 200, workerTimeout: 1000 },
    }));
    t.worker.events$.subscribe((e) => events.push(e));
  });
  after(() => closeTestApp({ db, sql, t }));

  it('go on while handlers hold the whole pool for three times workerTimeout', async () => {
    const workerId = t.worker.workerId;
    await t.jobs.addMany(Array.from({ length: 8 }, () => ({ identifier: 'hog' })));
    const sleepers = async () =>
      (await sql.query(`select count(*)::int as n from pg_stat_activity where datname = current_database() and query = 'select pg_sleep(3)' and state = 'active'`)).rows[0].n;
    await waitFor('the handlers to take the pool (4 connections, two pinned, for LISTEN and for claims: 2 left)', async () => (await sleepers()) === 2);
    const beat = async () => (await sql.query('select heartbeat_at from job_queue.workers where id = $1', [workerId])).rows[0].heartbeat_at.getTime();
    const first = await beat();
    await waitFor('two more heartbeats while the pool is full', async () => (await beat()) >= first + 400 && (await sleepers()) === 2);
    await waitForNoJobs(sql);
    assert.equal(t.worker.workerId, workerId, 'never declared dead, never fenced');
    assert.deepEqual(events.filter((e) => e.type === 'job:rescued' || e.type === 'worker:fenced' || e.type === 'job:error'), []);
  });
});
