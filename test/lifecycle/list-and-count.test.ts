import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import type { JobState, ListJobsOptions } from '../../libs/job-queue/src';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { explainStatement, planNodes, type PlanNode } from '../support/plan';

const STATES: JobState[] = ['blocked', 'waiting', 'scheduled', 'running', 'retrying', 'completed', 'failed', 'cancelled'];
const FINISHED: JobState[] = ['completed', 'failed', 'cancelled'];
const TASKS = ['a', 'b'];
const QUEUES = [null, 'q1', 'q2'];

interface Known {
  id: string;
  state: JobState;
  task: string;
  queue: string | null;
}

/**
 * listJobs pages and countJobs totals over a mixed set of jobs in every state, made with
 * add_job and SQL: 35 unfinished ones and 40 finished ones whose finish times come in
 * threes (ties, microseconds apart from the next three), so that pages end inside ties.
 */
describe('listJobs and countJobs', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  /** Every job made, with its state, task and queue: what the lists and counts must say. */
  const known: Known[] = [];

  before(async () => {
    ({ db, sql, t } = await openTestApp('lifecycle_lists', { jobQueue: { worker: false, externalTasks: '*' } }));
    await sql.query(`insert into job_queue.workers (id) values ('some-worker')`);
    for (let i = 0; i < 35; i++) {
      const task = TASKS[i % 2];
      const queue = QUEUES[i % 3];
      const future = i % 4 === 1;
      const { rows } = await sql.query(`select id::text from job_queue.add_job($1, queue_name => $2, run_at => now() + $3::interval)`, [task, queue, future ? '1 hour' : '0']);
      const { id } = rows[0];
      let state: JobState = future ? 'scheduled' : 'waiting';
      if (i % 5 === 0) {
        state = 'retrying';
        await sql.query(`update job_queue.jobs set attempts = 1, run_at = now() + interval '1 hour' where id = $1`, [id]);
      } else if (i % 7 === 3) {
        state = 'running';
        await sql.query(`update job_queue.jobs set attempts = 1, locked_by = 'some-worker', locked_at = now(), started_at = now() where id = $1`, [id]);
      } else if (i % 11 === 2) {
        state = 'waiting'; // claimed, not started
        await sql.query(`update job_queue.jobs set attempts = 1, locked_by = 'some-worker', locked_at = now() where id = $1`, [id]);
      }
      known.push({ id, state, task, queue });
    }
    // flows: a waiting root and a blocked step each (blocked jobs live in blocked_jobs)
    for (let i = 0; i < 6; i++) {
      const task = TASKS[i % 2];
      const queue = QUEUES[i % 3];
      const flow = await t.jobs.addFlow([
        { ref: 'root', identifier: task, queueName: queue ?? undefined },
        { ref: 'step', identifier: TASKS[(i + 1) % 2], queueName: queue ?? undefined, dependsOn: ['root'] },
      ]);
      known.push({ id: flow.jobs.root.id, state: 'waiting', task, queue }, { id: flow.jobs.step.id, state: 'blocked', task: TASKS[(i + 1) % 2], queue });
    }
    for (let i = 0; i < 40; i++) {
      const state = FINISHED[(i * 7) % 3];
      const task = TASKS[(i >> 1) % 2];
      const queue = QUEUES[i % 3];
      const { rows } = await sql.query(
        `insert into job_queue.finished_jobs (id, task_identifier, queue_name, payload, priority, run_at, attempts, max_attempts, flags, state, created_at, finished_at)
         select nextval(pg_get_serial_sequence('job_queue.jobs', 'id')), $1, $2, '{}', 0, now(), 1, 1, '{}', $3, now(),
                timestamptz '2000-01-01 00:00:00+00' + ($4::int / 3) * interval '1.000001 second'
         returning id::text`,
        [task, queue, state, i],
      );
      known.push({ id: rows[0].id, state, task, queue });
    }
  });
  after(() => closeTestApp({ db, sql, t }));

  /** The ids listJobs must return, in order, by the rows themselves: unfinished (jobs and blocked jobs) newest first, then finished last-finished first. */
  async function expectedIds(options: ListJobsOptions): Promise<string[]> {
    const matching = known.filter(
      (j) => (!options.state || j.state === options.state) && (!options.task || j.task === options.task) && (options.queue === undefined || j.queue === options.queue),
    );
    const ids = new Set(matching.map((j) => j.id));
    const active = (await sql.query('select u.id::text from (select id from job_queue.jobs union all select id from job_queue.blocked_jobs) u order by u.id desc')).rows.map((r) => r.id);
    const finished = (await sql.query('select f.id::text from job_queue.finished_jobs f order by f.finished_at desc, f.id desc')).rows.map((r) => r.id);
    return [...active, ...finished].filter((id) => ids.has(id));
  }

  /** Every page of a listing, `between` run after each; returns the ids in page order. */
  async function allPages(options: ListJobsOptions, between?: () => Promise<void>): Promise<{ ids: string[]; pages: number }> {
    const ids: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page = await t.jobs.listJobs({ ...options, cursor });
      assert.ok(page.jobs.length <= (options.limit ?? 50));
      ids.push(...page.jobs.map((job) => job.id));
      for (const job of page.jobs) assert.equal(job.state, known.find((k) => k.id === job.id)?.state ?? job.state);
      cursor = page.nextCursor;
      pages += 1;
      assert.ok(pages < 200, 'the pages end');
      await between?.();
    } while (cursor);
    return { ids, pages };
  }

  it('pages through every state, and all states, by a keyset cursor: each job once, in order', async () => {
    for (const state of [undefined, ...STATES]) {
      for (const limit of [1, 7, 1000]) {
        const options = { state, limit };
        const expected = await expectedIds(options);
        const { ids, pages } = await allPages(options);
        assert.deepEqual(ids, expected, `state ${state ?? '(any)'}, limit ${limit}`);
        assert.equal(pages, Math.max(1, Math.ceil(expected.length / limit)), `state ${state ?? '(any)'}, limit ${limit}: pages`);
      }
    }
    // without a state: the unfinished jobs first, then the finished ones
    const { jobs } = await t.jobs.listJobs({ limit: 1000 });
    const firstFinished = jobs.findIndex((job) => FINISHED.includes(job.state));
    assert.equal(firstFinished, 47, '35 jobs and 12 of flows');
    assert.ok(jobs.slice(firstFinished).every((job) => FINISHED.includes(job.state)));
  });

  it('filters by task and queue, alone and with a state', async () => {
    const cases: ListJobsOptions[] = [
      { task: 'a' },
      { queue: 'q1' },
      { task: 'b', queue: 'q2' },
      { state: 'completed', task: 'a' },
      { state: 'failed', queue: 'q2' },
      { state: 'waiting', task: 'b', queue: 'q1' },
      { state: 'cancelled', task: 'b', queue: 'q1' },
      { task: 'nobody' },
    ];
    for (const options of cases) {
      const expected = await expectedIds(options);
      assert.deepEqual((await allPages({ ...options, limit: 4 })).ids, expected, JSON.stringify(options));
      for (const job of (await t.jobs.listJobs({ ...options, limit: 1000 })).jobs) {
        if (options.task) assert.equal(job.taskIdentifier, options.task);
        if (options.queue) assert.equal(job.queueName, options.queue);
      }
    }
  });

  it('never repeats or skips a job while jobs are added and finished between pages', async () => {
    for (const state of [undefined, 'waiting', 'completed'] as const) {
      const options = { state, limit: 6 };
      const expected = await expectedIds(options);
      const added: string[] = [];
      try {
        const { ids } = await allPages(options, async () => {
          added.push(...(await t.jobs.addMany([{ identifier: 'a' }, { identifier: 'b', queueName: 'q1' }])).map((job) => job.id));
          const { rows } = await sql.query(
            `insert into job_queue.finished_jobs (id, task_identifier, payload, priority, run_at, attempts, max_attempts, flags, state, created_at)
             select nextval(pg_get_serial_sequence('job_queue.jobs', 'id')), 'a', '{}', 0, now(), 1, 1, '{}', 'completed', now() returning id::text`,
          );
          added.push(rows[0].id);
        });
        const where = `state ${state ?? '(any)'}`;
        assert.equal(new Set(ids).size, ids.length, `${where}: no job twice`);
        assert.deepEqual(ids.filter((id) => expected.includes(id)), expected, `${where}: every job there was at the first page, in order`);
        // Jobs added later may appear only where the walk had not come yet: without a state,
        // the finished jobs are walked from the newest once the unfinished ones are done.
        const extra = ids.filter((id) => !expected.includes(id));
        assert.ok(extra.every((id) => added.includes(id)));
        if (state !== undefined) assert.deepEqual(extra, [], `${where}: the new jobs come before the cursor`);
      } finally {
        await sql.query('delete from job_queue.jobs where id = any($1)', [added]);
        await sql.query('delete from job_queue.finished_jobs where id = any($1)', [added]);
      }
    }
  });

  it('refuses bad input with its code', async () => {
    const code = (expected: string) => ({ code: expected });
    const cursor = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
    await assert.rejects(t.jobs.listJobs({ state: 'done' as JobState }), code('JQ_INVALID_STATE'));
    await assert.rejects(t.jobs.listJobs({ state: 'WAITING' as JobState }), code('JQ_INVALID_STATE'));
    for (const bad of ['nonsense', '', cursor({ phase: 'active', id: '0' }), cursor({ phase: 'active', id: 5 }), cursor({ phase: 'finished', id: '5', at: 'yesterday' }), cursor({ phase: 'later', id: '5' }), 42]) {
      await assert.rejects(t.jobs.listJobs({ cursor: bad as string }), code('JQ_INVALID_CURSOR'), `cursor ${JSON.stringify(bad)}`);
    }
    for (const limit of [0, -1, 1001, 2.5, Number.NaN, '10']) {
      await assert.rejects(t.jobs.listJobs({ limit: limit as number }), code('JQ_INVALID_SPEC'), `limit ${String(limit)}`);
    }
    for (const task of ['', 'x'.repeat(129), 5]) {
      await assert.rejects(t.jobs.listJobs({ task: task as string }), code('JQ_INVALID_TASK_IDENTIFIER'), `task ${JSON.stringify(task)}`);
    }
    await assert.rejects(t.jobs.listJobs({ queue: '' }), code('JQ_INVALID_QUEUE_NAME'));
    assert.equal((await t.jobs.listJobs({ limit: 1000 })).jobs.length, known.length);
    assert.equal((await t.jobs.listJobs({ limit: 1 })).jobs.length, 1);
  });

  it('countJobs counts every state exactly, in all, per task and per queue', async () => {
    const zero = () => Object.fromEntries(STATES.map((s) => [s, 0])) as Record<JobState, number>;
    const expected = { byState: zero(), byTask: {} as Record<string, Record<JobState, number>>, byQueue: {} as Record<string, Record<JobState, number>> };
    for (const job of known) {
      expected.byState[job.state] += 1;
      (expected.byTask[job.task] ??= zero())[job.state] += 1;
      if (job.queue) (expected.byQueue[job.queue] ??= zero())[job.state] += 1;
    }
    assert.ok(STATES.every((state) => expected.byState[state] > 0), 'the set has jobs in every state');
    assert.deepEqual(await t.jobs.countJobs(), expected);
  });
});

/** The plan's nodes on finished_jobs, in a few words each: "Index Scan Backward using finished_jobs_state_idx, 91 rows read". */
function scansOfHistory(plan: PlanNode): string[] {
  return planNodes(plan)
    .filter((node) => node['Relation Name'] === 'finished_jobs')
    .map((node) => {
      const bitmap = node['Node Type'] === 'Bitmap Heap Scan' ? node.Plans?.find((child) => child['Node Type'] === 'Bitmap Index Scan') : undefined;
      const index = node['Index Name'] ?? bitmap?.['Index Name'];
      const read = Number(node['Actual Rows'] ?? 0) * Number(node['Actual Loops'] ?? 1) + Number(node['Rows Removed by Filter'] ?? 0) * Number(node['Actual Loops'] ?? 1);
      return `${node['Node Type']}${node['Scan Direction'] ? ` ${node['Scan Direction']}` : ''}${index ? ` using ${index}` : ''}, ${read} rows read`;
    });
}

const MILLION = 1_000_000;

/**
 * A long history costs a page or a count nothing: with a million finished jobs the
 * statements listJobs and countJobs run walk finished_jobs_state_idx (or read
 * finished_counts), never scan finished_jobs. Plans are checked as the planner makes them
 * for the values given (a custom plan) and as a prepared statement may end up with (a
 * generic plan), since the library runs them as named prepared statements. The time each
 * took is printed as a diagnostic.
 */
describe('lists and counts over a million finished jobs', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  const statements = createQueries('job_queue');
  const LISTS = ['listJobsCompleted', 'listJobsFailed', 'listJobsCancelled', 'listJobsFinished'] as const;
  /** The statement listJobs runs: with a task, the one that walks finished_jobs_task_idx. */
  const listing = (list: (typeof LISTS)[number], values: unknown[]) => statements[values[0] === null ? list : (`${list}OfTask` as const)];
  /** A cursor half way down the history. */
  const middle = ['2026-01-06 18:53:20+00', '500000'];

  before(async () => {
    ({ db, sql, t } = await openTestApp('lifecycle_million', { jobQueue: { worker: false, externalTasks: '*' } }));
  });
  after(() => closeTestApp({ db, sql, t }));

  it('inserts a million finished jobs in one statement, and the counts follow', async (ctx) => {
    const started = Date.now();
    // 94% completed, 5% failed, 1% cancelled; tasks email, report, export 6:3:1, and rare (0.1%); a queue on one in 7; all independent of each other
    await sql.query(
      `insert into job_queue.finished_jobs (id, task_identifier, queue_name, payload, priority, run_at, attempts, max_attempts, flags, state, created_at, started_at, finished_at)
       select n,
              case when n % 997 = 0 then 'rare' when (n / 100) % 10 < 6 then 'email' when (n / 100) % 10 < 9 then 'report' else 'export' end,
              case when n % 7 = 0 then 'q' || ((n / 1000) % 5) end,
              '{}', 0, at, 1, 25, '{}',
              case when n % 20 = 3 then 'failed' when n % 100 = 7 then 'cancelled' else 'completed' end,
              at, at, at
       from generate_series(1, $1::int) n, lateral (select timestamptz '2026-01-01 00:00:00+00' + n * interval '1 second' as at) t`,
      [MILLION],
    );
    await sql.query(`select setval(pg_get_serial_sequence('job_queue.jobs', 'id'), $1)`, [MILLION]);
    const insertMs = Date.now() - started;
    await sql.query('analyze job_queue.finished_jobs');
    ctx.diagnostic(`insert of ${MILLION} rows: ${insertMs} ms; analyze: ${Date.now() - started - insertMs} ms`);

    const { rows } = await sql.query('select state, count(*)::int as n from job_queue.finished_jobs group by state');
    const { byState } = await t.jobs.countJobs();
    for (const row of rows) assert.equal(byState[row.state as JobState], row.n, `countJobs().byState.${row.state}`);
    assert.equal(byState.completed + byState.failed + byState.cancelled, MILLION);
  });

  it('listJobs walks finished_jobs_state_idx (or, for a task, either it or finished_jobs_task_idx) backwards for each finished state: first and later pages, a common task, a queue', async (ctx) => {
    const cases: Array<[string, unknown[]]> = [
      ['first page', [null, null, null, null, 51]],
      ['task email', ['email', null, null, null, 51]],
      ['queue q1', [null, 'q1', null, null, 51]],
      ['a later page', [null, null, ...middle, 51]],
      ['a later page of task report', ['report', null, ...middle, 51]],
    ];
    for (const statement of LISTS) {
      for (const [label, values] of cases) {
        // listJobs plans these for their values on every call (runPlannedEachTime): a generic plan never runs
        for (const generic of [false]) {
          const { plan, ms } = await explainStatement(sql, listing(statement, values), values, generic);
          const where = `${statement}, ${label}, ${generic ? 'generic' : 'custom'} plan`;
          const scans = scansOfHistory(plan);
          ctx.diagnostic(`${where}: ${ms.toFixed(1)} ms; ${scans.join('; ')}`);
          assert.ok(scans.length > 0, where);
          // with a common task either index serves: the planner picks by the task's share of the history
          const index = values[0] === null ? /^Index Scan Backward using finished_jobs_state_idx,/ : /^Index Scan Backward using finished_jobs_(state|task)_idx,/;
          for (const scan of scans) assert.match(scan, index, where);
        }
      }
    }
  });

  it('countJobs reads finished_counts, not finished_jobs', async () => {
    for (const generic of [false, true]) {
      const nodes = planNodes((await explainStatement(sql, statements.countJobs, [], generic)).plan);
      assert.ok(!nodes.some((node) => node['Relation Name'] === 'finished_jobs'), 'finished_jobs is not read');
      assert.ok(nodes.some((node) => node['Relation Name'] === 'finished_counts'));
    }
  });

  it('a task filter that matches few or no finished jobs reads finished_jobs through its index, never by a Seq Scan', async (ctx) => {
    const cases: Array<[string, unknown[]]> = [
      ['task rare (0.1%)', ['rare', null, null, null, 51]],
      ['a task with no finished job', ['nobody', null, null, null, 51]],
    ];
    const failures: string[] = [];
    for (const statement of LISTS) {
      for (const [label, values] of cases) {
        // listJobs plans these for their values on every call (runPlannedEachTime): a generic plan never runs
        for (const generic of [false]) {
          const { plan, ms } = await explainStatement(sql, listing(statement, values), values, generic);
          const where = `${statement}, ${label}, ${generic ? 'generic' : 'custom'} plan`;
          const scans = scansOfHistory(plan);
          ctx.diagnostic(`${where}: ${ms.toFixed(1)} ms; ${scans.join('; ')}`);
          if (scans.length === 0 || scans.some((scan) => !scan.includes('using finished_jobs_task_idx'))) failures.push(`${where}: ${scans.join('; ')} (${ms.toFixed(0)} ms)`);
        }
      }
    }
    assert.deepEqual(failures, [], 'plans that scan the history without its index');
  });
});
