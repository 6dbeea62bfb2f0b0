import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Client } from 'pg';
import { waitFor } from '../support/wait';
import { LIMITED_RUNS_TABLE, processSuite } from '../support/process-suite';

/**
 * The most starts of `jobIds` inside any closed window of `perMs`, by the jobs' `started_at`
 * (the claim's time, which getJob() reports): for each start, how many started from it to
 * `perMs` after it.
 */
async function mostStartsInWindow(sql: Client, jobIds: string[], perMs: number): Promise<number> {
  const { rows } = await sql.query<{ most: number }>(
    `with s as (select started_at from job_queue.finished_jobs where id = any($1::bigint[]))
     select coalesce(max((select count(*) from s o where o.started_at >= w.started_at and o.started_at <= w.started_at + $2 * interval '1 millisecond')), 0)::int as most
     from s w`,
    [jobIds, perMs],
  );
  return rows[0].most;
}

/** First and last start of `jobIds`, in ms, and how many finished. */
async function startSpan(sql: Client, jobIds: string[]): Promise<{ spanMs: number; finished: number }> {
  const { rows } = await sql.query<{ span_ms: number; finished: number }>(
    `select (extract(epoch from max(started_at) - min(started_at)) * 1000)::float8 as span_ms, count(*)::int as finished
     from job_queue.finished_jobs where id = any($1::bigint[]) and state = 'completed'`,
    [jobIds],
  );
  return { spanMs: rows[0].span_ms, finished: rows[0].finished };
}

/**
 * `@Task('limited', { rateLimit: { max: 5, per: 1000 } })` across 3 worker processes at
 * concurrency 10 (issue 27.3): no window of a second holds more than 5 starts, whether the
 * processes race for a backlog or are woken together, and the limit is used: 25 jobs take
 * about 4 windows, not 25. And setTaskLimits changes the limit of running workers.
 */
describe('rateLimit across worker processes', () => {
  const s = processSuite('rate_limit', { externalTasks: ['limited', 'nap'], tables: ['create table runs (job_id bigint not null, pid int not null, attempt int not null)', LIMITED_RUNS_TABLE] });

  const add = async (count: number) => (await s.t.jobs.addMany(Array.from({ length: count }, (_, n) => ({ identifier: 'limited' as never, payload: { ms: 0, n } as never })))).map((job) => job.id);
  const finished = async (ids: string[]) => (await startSpan(s.sql, ids)).finished === ids.length;

  it('25 jobs across three processes: at most 5 start in any second, and they take about 4 seconds, not 25', async () => {
    const backlog = await add(25);
    await s.start(3, { concurrency: 10, env: { LIMITED: '1', GLOBAL_CONCURRENCY: 'none', RATE_LIMIT: '5/1000' } });
    await waitFor('the backlog to run', () => finished(backlog), 30_000);
    assert.equal(await mostStartsInWindow(s.sql, backlog, 1000), 5, 'the most starts in a second is the limit');
    const { spanMs } = await startSpan(s.sql, backlog);
    // 25 starts at 5 a second need 4 whole windows between the first and the last; a limit used to the full takes little more.
    assert.ok(spanMs > 4000, `the starts spread over more than 4 s (${spanMs} ms)`);
    assert.ok(spanMs < 12_000, `the limit was used: 25 jobs started within ${spanMs} ms`);

    // Added while the three are idle: the NOTIFY wakes their claims together.
    const woken = await add(10);
    await waitFor('the second batch to run', () => finished(woken), 30_000);
    assert.equal(await mostStartsInWindow(s.sql, [...backlog, ...woken], 1000), 5, 'across both batches too');
    const { rows } = await s.sql.query<{ runs: number; pids: number }>('select count(*)::int as runs, count(distinct pid)::int as pids from limited_runs where job_id = any($1::bigint[])', [[...backlog, ...woken]]);
    assert.equal(rows[0].runs, 35, 'each job ran once');
    assert.ok(rows[0].pids >= 2, `more than one process ran them (${rows[0].pids})`);
    const { rows: attempts } = await s.sql.query<{ attempts: number }>('select distinct attempts from job_queue.finished_jobs where id = any($1::bigint[])', [backlog]);
    assert.deepEqual(attempts, [{ attempts: 1 }], 'jobs held back spent no attempt');
  });

  it('setTaskLimits changes the rate of running workers, and resetTaskLimits brings the declared one back', async () => {
    await s.start(3, { concurrency: 10, env: { LIMITED: '1', GLOBAL_CONCURRENCY: 'none', RATE_LIMIT: '5/1000' } });
    await s.t.jobs.setTaskLimits('limited', { rateLimit: { max: 2, per: '1s' } });
    const slower = await add(8);
    await waitFor('the jobs under the lower limit to run', () => finished(slower), 30_000);
    assert.equal(await mostStartsInWindow(s.sql, slower, 1000), 2, 'at most 2 a second under the new limit');
    assert.ok((await startSpan(s.sql, slower)).spanMs > 3000, '8 jobs at 2 a second take more than 3 s');

    // A concurrency limit over the same task, the rate removed: both limits are the override's.
    await s.t.jobs.setTaskLimits('limited', { rateLimit: null, globalConcurrency: 1 });
    const serial = (await s.t.jobs.addMany(Array.from({ length: 6 }, (_, n) => ({ identifier: 'limited' as never, payload: { ms: 100, n } as never })))).map((job) => job.id);
    await waitFor('the serial jobs to run', () => finished(serial), 30_000);
    const { rows: overlap } = await s.sql.query<{ n: number }>(
      `select count(*)::int as n from limited_runs a join limited_runs b on a.job_id < b.job_id
       where a.job_id = any($1::bigint[]) and b.job_id = any($1::bigint[]) and a.started_at < b.ended_at and b.started_at < a.ended_at`,
      [serial],
    );
    assert.equal(overlap[0].n, 0, 'globalConcurrency 1: no two attempts overlapped');
    const [entry] = (await s.t.jobs.listTaskLimits()).filter((e) => e.task === 'limited');
    assert.deepEqual(entry.limits, { concurrency: 1 }, 'the rate is removed, the concurrency set');

    await s.t.jobs.resetTaskLimits('limited');
    // The task was leased (globalConcurrency alone) and is rate-limited again: a worker learns that
    // within a notification's delay (docs/guides/limits.md), and a claim already on its way under
    // the lease may prefetch what is due, to start it later uncounted. Jobs that come due a second
    // later are claimed by workers that have all heard of the reset.
    const runAt = new Date(Date.now() + 1000);
    const declared = (await s.t.jobs.addMany(Array.from({ length: 12 }, (_, n) => ({ identifier: 'limited' as never, payload: { ms: 0, n } as never, runAt })))).map((job) => job.id);
    await waitFor('the jobs under the declared limit to run', () => finished(declared), 30_000);
    assert.equal(await mostStartsInWindow(s.sql, declared, 1000), 5, 'the declared 5 a second again');
  });

  it('a worker kept busy by a stream of prefetched jobs of another task still starts the rate-limited ones', async () => {
    await s.start(1, { concurrency: 4, env: { LIMITED: '1', GLOBAL_CONCURRENCY: 'none', RATE_LIMIT: '5/1000' } });
    // Short jobs of another task, enough for seconds of work: the worker prefetches them, and every slot that frees has one waiting.
    const stream = (await s.t.jobs.addMany(Array.from({ length: 20_000 }, () => ({ identifier: 'nap' as never, payload: { ms: 2 } as never })))).map((job) => job.id);
    await waitFor('the stream to be running', async () => (await s.sql.query('select 1 from runs limit 1')).rowCount === 1);
    const limited = await add(10);
    await waitFor('the rate-limited jobs to run', () => finished(limited), 60_000);
    const { rows } = await s.sql.query<{ left: number }>('select count(*)::int as left from job_queue.jobs where id = any($1::bigint[])', [stream]);
    assert.ok(rows[0].left > 0, 'they ran while the stream was still being worked, not after it drained');
    assert.equal(await mostStartsInWindow(s.sql, limited, 1000), 5);
    await waitFor('the stream to drain', async () => (await s.sql.query('select 1 from job_queue.jobs where id = any($1::bigint[]) limit 1', [stream])).rowCount === 0, 120_000);
  });
});
