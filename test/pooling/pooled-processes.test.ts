import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { createTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { skipWithoutPgBouncer, usePgBouncer } from '../support/pgbouncer';
import { waitFor, waitForValue } from '../support/wait';
import { LIMITED_RUNS_TABLE } from '../support/process-suite';
import { startWorkerProcesses, stopWorkerProcesses, type WorkerProcess } from '../support/worker-processes';

/**
 * Three worker processes (worker-process.ts) whose DataSource goes through PgBouncer in
 * transaction mode (Debian's 1.18: no protocol-level prepared statements), with
 * `transactionPooling`: once polling (no listenUrl), once with listenUrl, the direct URL. The
 * test's own app (a producer, worker: false) goes through PgBouncer too. What a worker does
 * without a pooler must hold there: every job once, retries, one cron job per tick, a cancel
 * reaching another process, a killed process's job run again elsewhere.
 */
for (const mode of ['polling', 'listenUrl'] as const) {
  describe(`through PgBouncer in transaction mode (transactionPooling, ${mode === 'polling' ? 'no listenUrl: polling' : 'listenUrl: LISTEN on a direct connection'})`, { skip: skipWithoutPgBouncer() }, () => {
    const pgbouncer = usePgBouncer();
    const bouncer = () => pgbouncer.get();
    let db: TestDatabase;
    let sql: Client;
    let t: TestApp;
    let workers: WorkerProcess[];
    // a heartbeat every 300 ms: in polling mode that is how cancels arrive
    const env = () => ({
      TRANSACTION_POOLING: '1',
      ...(mode === 'listenUrl' ? { LISTEN_URL: db.url } : {}),
      CRON: '1',
      LIMITED: '1',
      PRINT_LIMITS: 'limited',
      HEARTBEAT_INTERVAL: '300',
      WORKER_TIMEOUT: '2000',
    });

    before(async () => {
      db = await createTestDatabase(`pooled_${mode}`);
      sql = await connect(db.url);
      await sql.query('create table runs (job_id bigint not null, pid int not null, attempt int not null)');
      await sql.query('create table handler_events (seq serial, job_id bigint not null, pid int not null, event text not null, code text)');
      await sql.query('create table handler_go (job_id bigint not null)');
      await sql.query(LIMITED_RUNS_TABLE);
      await sql.query('create table ticks (ts timestamptz not null, backfilled boolean not null, job_id bigint not null, pid int not null)');
      const url = bouncer().through(db.url);
      // booting together through the pooler, they migrate once (transaction-scoped locks, or on listenUrl)
      workers = await startWorkerProcesses(3, { url, concurrency: 4, env: env() });
      t = await createTestApp({
        url,
        jobQueue: {
          worker: false,
          transactionPooling: true,
          ...(mode === 'listenUrl' ? { listenUrl: db.url } : {}),
          externalTasks: ['record', 'scripted', 'await-cancel', 'nap', 'limited'],
        },
      });
    });
    after(async () => {
      try {
        await stopWorkerProcesses(); // throws if a process crashed: the rest is closed all the same
      } finally {
        await t?.close();
        await pgbouncer.stop();
        await sql?.end();
        await db?.drop();
      }
    });

    it('the workers say whether they poll, once each', () => {
      for (const worker of workers) {
        const notices = worker.output.match(/transactionPooling is on and listenUrl is not set/g) ?? [];
        assert.equal(notices.length, mode === 'polling' ? 1 : 0, `worker ${worker.index} printed:\n${worker.output}`);
      }
    });

    it('three processes run 1,500 jobs, each exactly once', async () => {
      await waitForValue(sql, 'three registered workers', 'select count(*)::int from job_queue.workers', 3);
      const total = 1500;
      await sql.query(`select job_queue.add_job('record', jsonb_build_object('n', n)) from generate_series(1, $1) n`, [total]);
      await waitForValue(sql, 'every record job to run', 'select count(*)::int from runs', total);
      await waitFor('the record jobs to be written completed', async () => (await sql.query(`select count(*)::int as n from job_queue.jobs where task_identifier = 'record'`)).rows[0].n === 0);
      const { rows: [runs] } = await sql.query('select count(*)::int as runs, count(distinct job_id)::int as jobs, count(distinct pid)::int as pids from runs');
      assert.equal(runs.runs, total, 'no job ran twice');
      assert.equal(runs.jobs, total, 'every job ran');
      assert.ok(runs.pids >= 2, `the processes shared the work (${runs.pids} ran jobs)`);
      const { rows: [finished] } = await sql.query(`select count(*)::int as n from job_queue.finished_jobs where task_identifier = 'record' and state = 'completed' and attempts = 1`);
      assert.equal(finished.n, total, 'each completed at its first attempt');
    });

    it('a job that fails twice is retried, and completes at its third attempt with its two errors', async () => {
      const job = await t.jobs.add('scripted', { fail: 2, result: { done: true } } as never);
      const done = await t.jobs.waitForJob(job.id, { timeout: 30_000 });
      assert.equal(done.state, 'completed');
      assert.equal(done.attempts, 3);
      assert.deepEqual(done.result, { done: true });
      assert.deepEqual(done.errors.map((error) => error.message), ['attempt 1 failed', 'attempt 2 failed']);
    });

    it('cron adds one job per tick across the three processes, with no gap, and each runs once', async () => {
      // every live tick added so far, waiting or finished
      const added = async () =>
        (
          await sql.query(`
            select (payload->'_cron'->>'ts')::timestamptz as ts, count(*)::int as n from (
              select payload from job_queue.jobs where task_identifier = 'tick'
              union all select payload from job_queue.finished_jobs where task_identifier = 'tick') t
            where payload->'_cron'->>'backfilled' = 'false' group by 1 order by 1`)
        ).rows as Array<{ ts: Date; n: number }>;
      await waitFor('four ticks added', async () => (await added()).length >= 4);
      await waitFor('four ticks run', async () => (await sql.query('select count(*)::int as n from ticks')).rows[0].n >= 4);
      const ticks = await added();
      assert.deepEqual(ticks.filter((tick) => tick.n > 1), [], 'no tick added twice');
      const seconds = ticks.map((tick) => tick.ts.getTime() / 1000);
      for (let i = 1; i < seconds.length; i++) assert.equal(seconds[i] - seconds[i - 1], 1, `no tick missing between ${ticks[i - 1].ts.toISOString()} and ${ticks[i].ts.toISOString()}`);
      const { rows: twice } = await sql.query('select job_id from ticks group by job_id having count(*) > 1');
      assert.deepEqual(twice, [], 'no tick job ran twice');
    });

    it(`a cancel reaches the process running the job (${mode === 'polling' ? 'at its heartbeat: nothing LISTENs' : 'by NOTIFY or its heartbeat'}): its handler aborts with JQ_JOB_CANCELLED`, async () => {
      const job = await t.jobs.add('await-cancel');
      await waitForValue(sql, 'the handler to start', `select count(*)::int from handler_events where job_id = $1 and event = 'started'`, 1, [job.id]);
      await t.jobs.cancelJob(job.id, 'not needed');
      const ended = await t.jobs.waitForJob(job.id, { timeout: 30_000 }).catch((error: { code?: string; job?: { state: string } }) => error);
      assert.equal((ended as { code?: string }).code, 'JQ_JOB_CANCELLED');
      const { rows } = await sql.query('select event, code from handler_events where job_id = $1 order by seq', [job.id]);
      assert.deepEqual(rows, [
        { event: 'started', code: null },
        { event: 'aborted', code: 'JQ_JOB_CANCELLED' },
      ]);
      const { rows: [row] } = await sql.query('select state, last_error from job_queue.finished_jobs where id = $1', [job.id]);
      assert.deepEqual(row, { state: 'cancelled', last_error: 'JQ_JOB_CANCELLED: not needed' });
    });

    it('a task with globalConcurrency 2 (its claim a transaction of several statements through the pooler): at most 2 at once, and 2 reached', async () => {
      const ids = (await t.jobs.addMany(Array.from({ length: 16 }, (_, n) => ({ identifier: 'limited' as never, payload: { ms: 100, n } as never })))).map((job) => job.id);
      await waitForValue(sql, 'every limited job to end', 'select count(*)::int from limited_runs where job_id = any($1::bigint[]) and ended_at is not null', ids.length, [ids]);
      const { rows: [most] } = await sql.query(
        `select max((select count(*) from limited_runs o where o.job_id = any($1::bigint[]) and o.started_at <= s.started_at and o.ended_at > s.started_at))::int as n
         from limited_runs s where s.job_id = any($1::bigint[])`,
        [ids],
      );
      assert.equal(most.n, 2);
    });

    // Until a worker has read setTaskLimits' change its claims of a task it leases follow the
    // limit it knows (docs/guides/limits.md): polling, at its next poll; with listenUrl the
    // notification comes before the add's, but a claim begun before it (a poll's, under the old
    // limit) could still take a job added after it (9 starts in a second, once in a full run).
    // So the jobs are added once every process has read the rate.
    it('a rate-limited task (its count, claim and record one message, the values written in: nothing prepared through the pooler): at most 5 start in any second, each job once', { skip: mode === 'polling' }, async () => {
      await t.jobs.setTaskLimits('limited', { globalConcurrency: null, rateLimit: { max: 5, per: '1s' } });
      try {
        await Promise.all(workers.map((w) => w.waitForOutput('the rate heard', /^limits \{.*"rateLimit":\{"max":5/m)));
        const ids = (await t.jobs.addMany(Array.from({ length: 12 }, (_, n) => ({ identifier: 'limited' as never, payload: { ms: 10, n } as never })))).map((job) => job.id);
        await waitForValue(sql, 'every rate-limited job to finish', 'select count(*)::int from job_queue.finished_jobs where id = any($1::bigint[])', ids.length, [ids]);
        // by the starts the claims recorded (the jobs' started_at), as the limit counts them
        const { rows: [row] } = await sql.query(
          `with s as (select started_at from job_queue.finished_jobs where id = any($1::bigint[]))
           select max((select count(*) from s o where o.started_at between w.started_at and w.started_at + interval '1 second'))::int as most from s w`,
          [ids],
        );
        const { rows: [runs] } = await sql.query('select count(distinct job_id)::int as jobs, count(*)::int as runs from limited_runs where job_id = any($1::bigint[])', [ids]);
        assert.deepEqual({ ...row, ...runs }, { most: 5, jobs: 12, runs: 12 }, 'at most 5 in any second, and 5 reached; every job once');
      } finally {
        await t.jobs.resetTaskLimits('limited');
      }
    });

    it('no worker reported a failed statement meanwhile (a prepared statement or a setting lost by the pooler would show here)', () => {
      // the worker's reports (events reportError: `<what> failed, retrying: …`), and anything of a statement gone wrong
      for (const worker of workers) assert.doesNotMatch(worker.output, /failed, retrying|prepared statement|JQ_TRANSACTION_POOLER|ERROR/, `worker ${worker.index} printed:\n${worker.output}`);
    });

    it('a process killed with SIGKILL while running a job: another process runs it again, its lost attempt counted', async () => {
      const job = await t.jobs.add('nap', { ms: 60_000 } as never);
      let holder: WorkerProcess | undefined;
      await waitFor('a worker to start the nap', async () => {
        const { rows } = await sql.query('select locked_by from job_queue.jobs where id = $1 and started_at is not null', [job.id]);
        holder = workers.find((worker) => worker.workerId === rows[0]?.locked_by);
        return holder !== undefined;
      });
      await holder!.kill();
      await waitFor('another worker to take the job', async () => {
        const { rows } = await sql.query('select locked_by, attempts from job_queue.jobs where id = $1', [job.id]);
        return rows[0] !== undefined && rows[0].locked_by !== null && rows[0].locked_by !== holder!.workerId && rows[0].attempts === 2;
      });
      const { rows: [row] } = await sql.query(`select errors->0->>'code' as code from job_queue.jobs where id = $1`, [job.id]);
      assert.equal(row.code, 'JQ_WORKER_LOST');
      // and the survivors go on: a job added now runs once
      const later = await t.jobs.add('record');
      await waitForValue(sql, 'a survivor to run a later job', 'select count(*)::int from runs where job_id = $1', 1, [later.id]);
      await t.jobs.cancelJob(job.id, 'done with the test');
    });
  });
}
