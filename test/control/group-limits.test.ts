import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Client } from 'pg';
import { waitFor } from '../support/wait';
import { LIMITED_RUNS_TABLE, processSuite } from '../support/process-suite';

/**
 * The most attempts at once among the runs `limited_runs` recorded for `jobIds`, by the server's
 * clock (at each start, how many had started and not ended), per group (`group_key`, '' for
 * none) or, with `perGroup` false, across all of them.
 */
async function mostAtOnce(sql: Client, jobIds: string[], perGroup: boolean): Promise<Map<string, number>> {
  const { rows } = await sql.query<{ group_key: string; most: number }>(
    `with r as (select coalesce(group_key, '') as g, started_at, ended_at from limited_runs where job_id = any($1::bigint[]))
     select case when $2 then s.g else '*' end as group_key,
       max((select count(*) from r o where (not $2 or o.g = s.g) and o.started_at <= s.started_at and o.ended_at > s.started_at))::int as most
     from r s group by 1`,
    [jobIds, perGroup],
  );
  return new Map(rows.map((row) => [row.group_key, row.most]));
}

/**
 * The most starts of each group's jobs among `jobIds` in any closed window of `perMs`, by the
 * jobs' `started_at` (the claim's time, which the rate counts; the handler starts a moment later),
 * their groups from `limited_runs`.
 */
async function mostStartsInWindow(sql: Client, jobIds: string[], perMs: number): Promise<Map<string, number>> {
  const { rows } = await sql.query<{ group_key: string; most: number }>(
    `with r as (
       select distinct coalesce(l.group_key, '') as g, f.id, f.started_at
       from job_queue.finished_jobs f join limited_runs l on l.job_id = f.id where f.id = any($1::bigint[]))
     select s.g as group_key, max((select count(*) from r o where o.g = s.g and o.started_at >= s.started_at and o.started_at <= s.started_at + $2 * interval '1 millisecond'))::int as most
     from r s group by s.g`,
    [jobIds, perMs],
  );
  return new Map(rows.map((row) => [row.group_key, row.most]));
}

/** Runs of `jobIds` that ended, and how many runs in all. */
async function runsOf(sql: Client, jobIds: string[]): Promise<{ ended: number; runs: number; jobs: number }> {
  const { rows } = await sql.query<{ ended: number; runs: number; jobs: number }>(
    'select count(*) filter (where ended_at is not null)::int as ended, count(*)::int as runs, count(distinct job_id)::int as jobs from limited_runs where job_id = any($1::bigint[])',
    [jobIds],
  );
  return rows[0];
}

/**
 * `groupConcurrency` and `groupRateLimit` with the job spec `group` across 3 worker processes at
 * concurrency 10 (issue 27.2 and 27.3): each group stays within its limits, exactly, while the
 * groups run side by side; a group with a long backlog holds up no other; jobs without a group
 * are not limited per group; and setTaskLimits turns a group limit on for running workers.
 */
describe('limits per group across worker processes', () => {
  const s = processSuite('group_limits', { externalTasks: ['limited'], tables: [LIMITED_RUNS_TABLE] });

  const add = async (jobs: Array<{ group?: string; ms: number }>) =>
    (await s.t.jobs.addMany(jobs.map(({ group, ms }, n) => ({ identifier: 'limited' as never, payload: { ms, n } as never, ...(group ? { group } : {}) })))).map((job) => job.id);
  /** Every job ran to its end and its release is written (finished_jobs has its start). */
  const ranAll = async (ids: string[]) =>
    (await runsOf(s.sql, ids)).ended === ids.length &&
    (await s.sql.query('select 1 from job_queue.finished_jobs where id = any($1::bigint[])', [ids])).rowCount === ids.length;

  it('groupConcurrency 1 with 5 tenants: each tenant serial, the tenants in parallel, a long backlog holding up no other', async () => {
    // Tenant t0 has a backlog of 20 ahead of everything; t1..t4 have 4 each; 4 jobs have no group.
    const jobs = [
      ...Array.from({ length: 20 }, () => ({ group: 't0', ms: 100 })),
      ...['t1', 't2', 't3', 't4'].flatMap((group) => Array.from({ length: 4 }, () => ({ group, ms: 100 }))),
      ...Array.from({ length: 4 }, () => ({ ms: 300 })),
    ];
    const ids = await add(jobs);
    await s.start(3, { concurrency: 10, env: { LIMITED: '1', GLOBAL_CONCURRENCY: 'none', GROUP_CONCURRENCY: '1' } });
    await waitFor('every job to run', () => ranAll(ids), 30_000);

    const { runs, jobs: ran } = await runsOf(s.sql, ids);
    assert.deepEqual({ runs, ran }, { runs: ids.length, ran: ids.length }, 'each job ran once');
    const perGroup = await mostAtOnce(s.sql, ids, true);
    for (const group of ['t0', 't1', 't2', 't3', 't4']) assert.equal(perGroup.get(group), 1, `tenant ${group} ran one job at a time`);
    assert.ok((perGroup.get('') ?? 0) >= 2, `jobs without a group are not one group: ${perGroup.get('')} at once`);
    const grouped = ids.slice(0, 36);
    assert.equal((await mostAtOnce(s.sql, grouped, false)).get('*'), 5, 'the five tenants ran side by side');
    const { rows } = await s.sql.query<{ others_done: Date; t0_last: Date }>(
      `select max(ended_at) filter (where group_key <> 't0') as others_done, max(started_at) filter (where group_key = 't0') as t0_last
       from limited_runs where job_id = any($1::bigint[])`,
      [grouped],
    );
    assert.ok(rows[0].others_done < rows[0].t0_last, "the other tenants finished while t0's backlog still ran");
  });

  it('groupRateLimit 2 a second with 3 tenants: no tenant starts more than 2 in any second, and the tenants share none of it', async () => {
    const ids = await add(['a', 'b', 'c'].flatMap((group) => Array.from({ length: 6 }, () => ({ group, ms: 0 }))));
    await s.start(3, { concurrency: 10, env: { LIMITED: '1', GLOBAL_CONCURRENCY: 'none', GROUP_RATE_LIMIT: '2/1000' } });
    await waitFor('every job to run', () => ranAll(ids), 30_000);
    const most = await mostStartsInWindow(s.sql, ids, 1000);
    for (const group of ['a', 'b', 'c']) assert.equal(most.get(group), 2, `tenant ${group}: at most 2 starts in a second, and 2 reached`);
    const { rows } = await s.sql.query<{ span_ms: number }>(
      `select (extract(epoch from max(started_at) - min(started_at)) * 1000)::float8 as span_ms from job_queue.finished_jobs where id = any($1::bigint[])`,
      [ids],
    );
    // 6 starts a tenant at 2 a second need 2 whole windows; the tenants in parallel, so 18 jobs take about as long as 6.
    assert.ok(rows[0].span_ms > 2000, `the starts spread over more than 2 s (${rows[0].span_ms} ms)`);
    assert.ok(rows[0].span_ms < 6000, `the tenants' windows ran side by side: 18 jobs started within ${rows[0].span_ms} ms`);
  });

  it('setTaskLimits turns groupConcurrency on for running workers, and resetTaskLimits off', async () => {
    const processes = await s.start(3, { concurrency: 10, env: { LIMITED: '1', GLOBAL_CONCURRENCY: 'none', HEARTBEAT_INTERVAL: '250', PRINT_LIMITS: 'limited' } });
    await s.t.jobs.setTaskLimits('limited' as never, { groupConcurrency: 1 });
    // A task without a limit becomes limited on a worker once it has heard (at most a pollInterval): wait until each has.
    await Promise.all(processes.map((p) => p.waitForOutput('the group limit heard', /^limits \{"groupConcurrency":1\}$/m)));
    const limited = await add(['x', 'y'].flatMap((group) => Array.from({ length: 5 }, () => ({ group, ms: 100 }))));
    await waitFor('the limited jobs to run', () => ranAll(limited), 30_000);
    const perGroup = await mostAtOnce(s.sql, limited, true);
    assert.deepEqual([perGroup.get('x'), perGroup.get('y')], [1, 1], 'one at a time per group once set');

    await s.t.jobs.resetTaskLimits('limited' as never);
    // The reset is heard by every worker before a claim that follows it: wait until a burst runs, then look at it.
    const free = await add(Array.from({ length: 6 }, () => ({ group: 'z', ms: 300 })));
    await waitFor('the unlimited jobs to run', () => ranAll(free), 30_000);
    assert.ok(((await mostAtOnce(s.sql, free, true)).get('z') ?? 0) >= 2, 'after the reset a group runs several at once');
  });
});
