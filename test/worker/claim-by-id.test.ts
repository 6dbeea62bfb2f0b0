import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { JobQueueDatabase, type Statement } from '../../libs/job-queue/src/db/job-queue-database';
import type { ClaimedRow } from '../../libs/job-queue/src/worker/claimed-job';
import { CLAIM_SESSION_SETTINGS } from '../../libs/job-queue/src/worker/claim-connection';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { closeTestApp, createTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { NotificationRecorder } from '../support/notifications';
import { planNodes, statisticsSayJobsIsEmpty, type PlanNode } from '../support/plan';
import { waitFor } from '../support/wait';

/** Each run of `counted` and `other`, by job id: the provider instance (one per app) that ran it, recorded outside the handler. */
const runs = new Map<string, object[]>();
const record = (id: string, by: object) => runs.set(id, [...(runs.get(id) ?? []), by]);

@Injectable()
class CountedTasks {
  @Task('counted')
  async counted(_payload: unknown, ctx: JobContext) {
    record(ctx.job.id, this);
  }
}

@Injectable()
class OtherTasks {
  @Task('other')
  async other(_payload: unknown, ctx: JobContext) {
    record(ctx.job.id, this);
  }
}

describe('claimJobsById: the jobs a NOTIFY named, by the rules of the general claim', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => ({ db, sql, t } = await openTestApp('claim_by_id_sql', { providers: [CountedTasks], jobQueue: { worker: false, externalTasks: ['elsewhere'] } })));
  after(() => closeTestApp({ db, sql, t }));

  it('takes the named jobs it may run, up to its limit, marks started as many as slots are free, and skips every other', async () => {
    const database = t.app.get(JobQueueDatabase);
    await database.run('registerWorker', ['claimer', 20_000, null, null, null]);
    await database.run('registerWorker', ['holder', 20_000, null, null, null]);
    const add = async (spec: Record<string, unknown> = {}, identifier = 'counted') => (await t.jobs.add(identifier as never, {} as never, spec)).id;
    const plain = [await add(), await add(), await add()];
    const skipped = {
      otherTask: await add({}, 'elsewhere'),
      flagged: await add({ flags: ['blocked'] }),
      later: await add({ runAt: new Date(Date.now() + 3_600_000) }),
      queued: await add({ queueName: 'serial' }),
      cancelled: await add(),
      locked: await add(),
    };
    await sql.query('update job_queue.jobs set cancel_requested_at = now() where id = $1', [skipped.cancelled]);
    await sql.query(`update job_queue.jobs set locked_at = now(), locked_by = 'holder', attempts = 1 where id = $1`, [skipped.locked]);
    const notNamed = await add();
    const claim = (worker: string, ids: string[], limit: number, started: number) =>
      database.run<ClaimedRow>('claimJobsById', [['counted', 'external'], ['blocked'], limit, worker, started, ids]);

    // a worker without its row (declared dead) claims nothing
    assert.deepEqual(await claim('gone', [...plain, ...Object.values(skipped)], 10, 10), []);
    // limit 2 of the 3 plain jobs, 1 marked started: the first by (priority, run_at, id)
    const first = await claim('claimer', [...Object.values(skipped), ...plain], 2, 1);
    assert.deepEqual(first.map((row) => [row.id, row.started, row.candidate_count]), [[plain[0], true, 2], [plain[1], false, 2]]);
    const rest = await claim('claimer', [...plain, ...Object.values(skipped)], 10, 10);
    assert.deepEqual(rest.map((row) => row.id), [plain[2]], 'taken jobs and every skipped one are not claimed again');
    const { rows } = await sql.query<{ id: string; locked_by: string | null; attempts: number }>(
      'select id, locked_by, attempts from job_queue.jobs where id = any($1::bigint[]) order by id',
      [[...Object.values(skipped), notNamed]],
    );
    assert.deepEqual(
      rows.map((row) => [row.id, row.locked_by, row.attempts]),
      [...Object.values(skipped), notNamed].map((id) => [id, id === skipped.locked ? 'holder' : null, id === skipped.locked ? 1 : 0]),
      'the skipped jobs and the job no NOTIFY named are as they were',
    );
  });
});

describe('claimJobsById reaches its rows by primary key', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => ({ db, sql, t } = await openTestApp('claim_by_id_plan', { jobQueue: { worker: false, externalTasks: '*' } })));
  after(() => closeTestApp({ db, sql, t }));

  /**
   * claimJobsById for the 'work' job `id` on `sql`, as `inClaimTransaction` prepared it (its
   * generic plan made at the first call, kept for the next): its plan's scans of jobs.
   */
  const claimScans = async (id: string) => {
    const explained = await sql.query(`explain (analyze, format json) execute by_id('{work}', '{}', 10, 'plan-worker', 10, '{${id}}')`);
    const plan = explained.rows[0]['QUERY PLAN'][0].Plan as PlanNode;
    const scans = planNodes(plan).filter((n) => n['Relation Name'] === 'jobs' && n['Node Type'] !== 'ModifyTable');
    return { claimed: plan['Actual Rows'], scans, described: JSON.stringify(scans.map((n) => [n['Node Type'], n['Index Name'], n['Index Cond'], n['Rows Removed by Filter']])) };
  };
  const addWork = async () => (await sql.query<{ id: string }>(`insert into job_queue.jobs (task_identifier, payload) values ('work', '{}') returning id`)).rows[0].id;
  const assertReadAlone = ({ claimed, scans, described }: Awaited<ReturnType<typeof claimScans>>) => {
    assert.ok(scans.length > 0 && scans.every((n) => n['Index Name'] === 'jobs_pkey' && /^\(id = ANY/.test(n['Index Cond'] ?? '')), `jobs is only probed by its ids: ${described}`);
    assert.ok(scans.every((n) => (n['Rows Removed by Filter'] ?? 0) === 0), `no row read but the named one: ${described}`);
    assert.equal(claimed, 1, 'the named job was claimed');
  };
  const inClaimTransaction = async (work: () => Promise<void>) => {
    await sql.query(`insert into job_queue.workers (id) values ('plan-worker') on conflict do nothing`);
    await sql.query('begin');
    try {
      await sql.query(CLAIM_SESSION_SETTINGS.replace(/\bset /g, 'set local '));
      await sql.query(`prepare by_id(text[], text[], integer, text, integer, bigint[]) as ${createQueries('job_queue').claimJobsById}`);
      await work();
    } finally {
      await sql.query('rollback');
      await sql.query('deallocate all');
    }
  };

  it('behind 20,000 due jobs it may not take, with the claim connection\'s settings and its generic plan, it reads the named row alone', async () => {
    await sql.query(`insert into job_queue.jobs (task_identifier, payload) select 'elsewhere', '{}' from generate_series(1, 20000)`);
    const id = await addWork();
    await sql.query('vacuum analyze job_queue.jobs');
    await inClaimTransaction(async () => assertReadAlone(await claimScans(id)));
  });

  it('with its generic plan made while the table was empty, beside 20,000 due jobs of a task before its own added since, it reads the named row alone', async () => {
    // The generic plan lasts until the table's next ANALYZE or VACUUM: a drained table, then a backlog of a task this worker does not run.
    await sql.query('delete from job_queue.jobs');
    await statisticsSayJobsIsEmpty(sql);
    await inClaimTransaction(async () => {
      assertReadAlone(await claimScans(await addWork()));
      await sql.query(`insert into job_queue.jobs (task_identifier, payload) select 'elsewhere', '{}' from generate_series(1, 20000)`);
      assertReadAlone(await claimScans(await addWork()));
    });
  });
});

describe('jobs added alone in another process: claimed by id, each run once', () => {
  let db: TestDatabase;
  let sql: Client;
  let producer: TestApp;
  const workers: TestApp[] = [];
  let notifications: NotificationRecorder;
  const claimed = new Map<string, number>();

  before(async () => {
    // No poll: every job runs through the NOTIFY its add sent, and the claim that heard it.
    ({ db, sql, t: producer } = await openTestApp('claim_by_id_workers', { providers: [CountedTasks], jobQueue: { worker: false, externalTasks: ['other'] } }));
    for (const providers of [[CountedTasks], [CountedTasks], [OtherTasks]]) {
      workers.push(await createTestApp({ url: db.url, providers, jobQueue: { concurrency: 4, pollInterval: 600_000, localStart: false } }));
    }
    for (const worker of workers) await worker.worker.runUntilIdle();
    // the jobs each claim statement took: this test is about the one by id
    for (const worker of workers) {
      const database = worker.app.get(JobQueueDatabase);
      const runOn = database.runOn.bind(database);
      database.runOn = (async (client: never, statement: Statement, values: unknown[]) => {
        const rows = await runOn(client, statement, values);
        if (statement.startsWith('claimJobs')) claimed.set(statement, (claimed.get(statement) ?? 0) + rows.length);
        return rows;
      }) as JobQueueDatabase['runOn'];
    }
    notifications = await NotificationRecorder.listen(db.url, 'job_queue:jobs');
  });
  after(async () => {
    await notifications?.end();
    for (const worker of workers) await worker.close();
    await closeTestApp({ db, sql, t: producer });
  });

  it('three idle workers hear every add; each job runs once, by a worker that runs its task', async () => {
    await notifications.barrier();
    const counted = await Promise.all(Array.from({ length: 60 }, (_, n) => producer.jobs.add('counted', { n } as never)));
    const other = await Promise.all(Array.from({ length: 20 }, (_, n) => producer.jobs.add('other' as never, { n } as never)));
    const all = [...counted, ...other];
    const payloads = await notifications.barrier();
    assert.deepEqual(new Set(payloads), new Set(all.map((job) => job.id)), 'each add named its job');
    await waitFor('every job to run', () => all.every((job) => runs.has(job.id)));
    await waitFor('every job to be written completed', async () => Number((await sql.query('select count(*) from job_queue.jobs')).rows[0].count) === 0);
    const took = JSON.stringify([...claimed]);
    assert.ok((claimed.get('claimJobsById') ?? 0) > 0, `jobs were claimed by id: ${took}`);
    assert.equal((claimed.get('claimJobsById') ?? 0) + (claimed.get('claimJobs') ?? 0), all.length, `each job was claimed once: ${took}`);
    const [first, second, third] = [workers[0].app.get(CountedTasks), workers[1].app.get(CountedTasks), workers[2].app.get(OtherTasks)];
    for (const job of counted) assert.equal(runs.get(job.id)!.length, 1, `job ${job.id} ran once`);
    for (const job of other) assert.deepEqual(runs.get(job.id), [third], `job ${job.id} ran once, by the worker of its task`);
    assert.ok(counted.every((job) => [first, second].includes(runs.get(job.id)![0] as CountedTasks)), 'the counted jobs ran on their two workers');
    const { rows } = await sql.query('select count(*)::int as n from job_queue.finished_jobs where id = any($1::bigint[]) and state = $2', [all.map((job) => job.id), 'completed']);
    assert.equal(rows[0].n, all.length, 'every job completed once in the history');
  });

  it('a job that comes due unnamed (a scheduled one) is claimed within a moment under a stream of named adds, not at the poll', async () => {
    const scheduled = await producer.jobs.add('counted', {} as never, { runAt: new Date(Date.now() + 300) });
    assert.equal(scheduled.state, 'scheduled', 'no NOTIFY: nothing wakes a worker when it comes due but a claim of whatever is next');
    const stream: string[] = [];
    for (let n = 0; n < 100 && !runs.has(scheduled.id); n++) {
      stream.push((await producer.jobs.add('counted', { n } as never)).id);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.ok(runs.has(scheduled.id), `the scheduled job ran during the stream of ${stream.length} named adds (the poll is ten minutes away)`);
    await waitFor('the stream to run', () => stream.every((id) => runs.has(id)));
  });

  it('a job of a named queue, whose NOTIFY names none, still wakes the general claim', async () => {
    await notifications.barrier();
    const queued = await producer.jobs.add('counted', {} as never, { queueName: 'serial' });
    // Its add's NOTIFY comes first; the release that unlocks its queue may send another '' before the barrier's marker.
    const payloads = await notifications.barrier();
    assert.equal(payloads[0], '', 'a queued job is not named: only the general claim takes a queue head');
    assert.ok(!payloads.includes(queued.id), `no NOTIFY named it: ${JSON.stringify(payloads)}`);
    await waitFor('the queued job to run', () => runs.has(queued.id));
    assert.equal(runs.get(queued.id)!.length, 1);
  });
});
