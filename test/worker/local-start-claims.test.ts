import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { JobQueueDatabase, type Statement } from '../../libs/job-queue/src/db/job-queue-database';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { waitFor } from '../support/wait';

/** The order `gated` handlers began in, by payload name; each runs until the test opens its gate. */
const started: string[] = [];
const gates: Array<() => void> = [];
let passThrough = false;

@Injectable()
class OrderTasks {
  @Task('gated')
  async gated(payload: { name: string }, _ctx: JobContext) {
    started.push(payload.name);
    if (!passThrough) await new Promise<void>((resolve) => gates.push(resolve));
  }
}

describe('localStart beside a claim in flight', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    // One slot, no poll: the claim that a NOTIFY starts is the only one.
    ({ db, sql, t } = await openTestApp('local_start_claims', { providers: [OrderTasks], jobQueue: { concurrency: 1, pollInterval: 600_000 } }));
  });
  after(async () => {
    passThrough = true;
    for (const open of gates.splice(0)) open();
    await closeTestApp({ db, sql, t });
  });

  it('a job added while a claim is on its way waits for the table: the job the claim marked started for the free slot starts first', async () => {
    const jqdb = t.app.get(JobQueueDatabase);
    const runOn = jqdb.runOn.bind(jqdb);
    let claimAnswered!: () => void;
    const answered = new Promise<void>((resolve) => (claimAnswered = resolve));
    let releaseClaim!: () => void;
    const claimHeld = new Promise<void>((resolve) => (releaseClaim = resolve));
    jqdb.runOn = (async (client: never, statement: Statement, values: unknown[]) => {
      const rows = await runOn(client, statement, values);
      if ((statement === 'claimJobs' || statement === 'claimJobsById') && rows.length > 0) {
        claimAnswered();
        await claimHeld;
      }
      return rows;
    }) as JobQueueDatabase['runOn'];
    try {
      // added where it cannot start at its add (in a transaction): its NOTIFY wakes the claim
      const first = await t.dataSource.transaction((manager) => t.jobs.add('gated', { name: 'claimed' }, { manager }));
      await answered;
      const { rows } = await sql.query('select started_at is not null as started from job_queue.jobs where id = $1', [first.id]);
      assert.deepEqual(rows, [{ started: true }], 'claimed for the free slot');
      const second = await t.jobs.add('gated', { name: 'added' });
      releaseClaim();
      await waitFor('a job to start', () => started.length === 1);
      assert.deepEqual(started, ['claimed'], 'the claimed job has the slot it was claimed for');
      assert.equal(second.state, 'waiting', 'the later job waits for a claim');
      for (const open of gates.splice(0)) open();
      await waitFor('both jobs to run', () => started.length === 2);
      assert.deepEqual(started, ['claimed', 'added']);
    } finally {
      releaseClaim();
      jqdb.runOn = runOn;
    }
  });
});
