import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { JobQueueDatabase } from '../../libs/job-queue/src/db/job-queue-database';
import { ClaimConnection } from '../../libs/job-queue/src/worker/claim-connection';
import { toClaimedJob, type ClaimedRow } from '../../libs/job-queue/src/worker/claimed-job';
import { closeTestApp, createTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';

/**
 * The claim returns only part of each row, times as epoch milliseconds (worker/claimed-job.ts):
 * the Job a handler and the events get from it must be the one getJob() reads from the table.
 */
describe('a claimed job', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => ({ db, sql, t } = await openTestApp('claimed_job', { jobQueue: { worker: false, externalTasks: '*' } })));
  after(() => closeTestApp({ db, sql, t }));

  it('is the job getJob() reads: started or prefetched, with every field set or left empty', async () => {
    const full = await t.jobs.add('inspect' as never, { to: 'ada', n: [1, 2] } as never, {
      queueName: 'mail', jobKey: 'welcome-ada', flags: ['slow', 'eu'], priority: -3, maxAttempts: 5,
    });
    const plain = await t.jobs.add('inspect' as never, null as never, { priority: -2 });
    // A failed attempt before, progress, a trace, and times on and off millisecond boundaries.
    await sql.query(
      `update job_queue.jobs set attempts = 1, last_error = 'smtp down',
         errors = '[{"at": "2026-01-02T03:04:05.678+00:00", "attempt": 1, "message": "smtp down", "code": "ECONNREFUSED"}]',
         progress = '{"sent": 3}', run_at = '2026-01-02 03:04:05.999999+00', first_run_at = '2026-01-01 00:00:00+00',
         created_at = '2025-12-31 23:59:59.000001+00', trace_id = '4bf92f35-77b3-4da8-a3c4-0e0f0b0e0a0b', span_id = -42, trace_flags = 1
       where id = $1`,
      [full.id],
    );
    await sql.query(`update job_queue.jobs set run_at = '2026-01-02 03:04:05.123+00', created_at = '2026-01-02 03:04:05+00' where id = $1`, [plain.id]);
    await sql.query(`insert into job_queue.workers (id) values ('claimer')`);

    const rows = await t.app.get(JobQueueDatabase).run<ClaimedRow>('claimJobs', [['inspect'], [], 10, 'claimer', 1, []]);
    assert.deepEqual(rows.map((row) => [row.id, row.started]), [[full.id, true], [plain.id, false]], 'one started for the free slot, one prefetched');
    for (const row of rows) {
      const claimed = toClaimedJob(row, 'claimer');
      const read = await t.jobs.getJob(row.id);
      assert.deepEqual(claimed, read, `job ${row.id}`);
    }
    const started = toClaimedJob(rows[0], 'claimer');
    assert.equal(started.state, 'running');
    assert.equal(started.runAt.toISOString(), '2026-01-02T03:04:05.999Z');
    assert.equal(started.createdAt.toISOString(), '2025-12-31T23:59:59.000Z');
    assert.deepEqual(started.flags, ['slow', 'eu']);
    assert.deepEqual(started.traceContext, { traceparent: '00-4bf92f3577b34da8a3c40e0f0b0e0a0b-ffffffffffffffd6-01' });
    const prefetched = toClaimedJob(rows[1], 'claimer');
    assert.deepEqual([prefetched.state, prefetched.startedAt, prefetched.flags], ['waiting', null, []]);
    assert.equal(prefetched.runAt.toISOString(), '2026-01-02T03:04:05.123Z');
  });
  it('has the times getJob() reads when the database prints floats with fewer digits (extra_float_digits = 0 set for it, or for the role)', async () => {
    await sql.query('delete from job_queue.jobs');
    const job = await t.jobs.add('inspect' as never, null as never, {});
    await sql.query(`update job_queue.jobs set run_at = '2026-01-02 03:04:05.999999+00', created_at = '2026-01-02 03:04:05.999999+00' where id = $1`, [job.id]);
    await sql.query(`insert into job_queue.workers (id) values ('digits')`);
    await sql.query(`alter database "${db.name}" set extra_float_digits = 0`);
    const app = await createTestApp({ url: db.url, jobQueue: { worker: false, externalTasks: '*' } });
    try {
      const database = app.app.get(JobQueueDatabase);
      // as the worker claims: on its claim connection, with the claim's settings
      const claims = new ClaimConnection(() => database.pool);
      const [row] = await claims.run((client) => database.runOn<ClaimedRow>(client, 'claimJobs', [['inspect'], [], 10, 'digits', 1, []])).finally(() => claims.close());
      const claimed = toClaimedJob(row, 'digits');
      assert.equal(claimed.runAt.toISOString(), '2026-01-02T03:04:05.999Z');
      assert.equal(claimed.createdAt.toISOString(), '2026-01-02T03:04:05.999Z');
      assert.deepEqual(claimed, await app.jobs.getJob(job.id));
    } finally {
      await sql.query(`alter database "${db.name}" reset extra_float_digits`);
      await app.close();
    }
  });

  it("has the earliest date as run_at when run_at is '-infinity' (add_job takes it), and the claim does not fail", async () => {
    await sql.query('delete from job_queue.jobs');
    const { rows: added } = await sql.query<{ id: string }>(`select id from job_queue.add_job('inspect', run_at => '-infinity')`);
    await sql.query(`insert into job_queue.workers (id) values ('infinite') on conflict do nothing`);
    const rows = await t.app.get(JobQueueDatabase).run<ClaimedRow>('claimJobs', [['inspect'], [], 10, 'infinite', 1, []]);
    assert.deepEqual(rows.map((row) => row.id), [added[0].id]);
    assert.equal(toClaimedJob(rows[0], 'infinite').runAt.getTime(), -8.64e15);
  });

  it('has the times getJob() reads before 1970, between milliseconds (set from SQL)', async () => {
    await sql.query('delete from job_queue.jobs');
    const job = await t.jobs.add('inspect' as never, null as never, {});
    await sql.query(`update job_queue.jobs set run_at = '1969-12-31 23:59:59.9985+00', created_at = '1969-07-20 20:17:40.000001+00' where id = $1`, [job.id]);
    await sql.query(`insert into job_queue.workers (id) values ('old-times')`);
    const [row] = await t.app.get(JobQueueDatabase).run<ClaimedRow>('claimJobs', [['inspect'], [], 10, 'old-times', 1, []]);
    const claimed = toClaimedJob(row, 'old-times');
    const read = await t.jobs.getJob(job.id);
    assert.equal(claimed.runAt.toISOString(), read!.runAt.toISOString(), 'runAt');
    assert.equal(claimed.createdAt.toISOString(), read!.createdAt.toISOString(), 'createdAt');
  });
});
