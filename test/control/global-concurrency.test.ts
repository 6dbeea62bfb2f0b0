import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { DataSource } from 'typeorm';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';
import { LIMITED_RUNS_TABLE, processSuite } from '../support/process-suite';

/**
 * The most attempts of `limited` at once, from the start and end times its handlers record
 * (test/support/worker-process.ts, LIMITED=1), by the server's clock: at each start, how many
 * attempts had started and not ended. An attempt of a killed process never records its end:
 * `killedAt` stands for it. `since`: only the starts from then on.
 */
async function mostAtOnce(sql: Client, jobIds: string[], killedAt: Date | null = null, since: Date | null = null): Promise<number> {
  const { rows } = await sql.query<{ most: number }>(
    `with r as (
       select started_at, coalesce(ended_at, $2::timestamptz, 'infinity') as ended_at from limited_runs where job_id = any($1::bigint[])
     )
     select coalesce(max((select count(*) from r o where o.started_at <= s.started_at and o.ended_at > s.started_at)), 0)::int as most
     from r s where s.started_at >= coalesce($3::timestamptz, '-infinity')`,
    [jobIds, killedAt, since],
  );
  return rows[0].most;
}

/** The jobs among `jobIds` with an attempt that ended. */
async function ended(sql: Client, jobIds: string[]): Promise<number> {
  const { rows } = await sql.query<{ n: number }>('select count(distinct job_id)::int as n from limited_runs where job_id = any($1::bigint[]) and ended_at is not null', [jobIds]);
  return rows[0].n;
}

/** `globalConcurrency: 1` in the test's own process, which has a worker: for local starts. */
@Injectable()
class SoloTasks {
  constructor(private readonly dataSource: DataSource) {}

  @Task('solo', { globalConcurrency: 1 })
  async solo(payload: { ms: number }, ctx: JobContext) {
    await this.dataSource.query('insert into limited_runs (job_id, pid, attempt, started_at) values ($1, $2, $3, clock_timestamp())', [ctx.job.id, process.pid, ctx.job.attempts]);
    await new Promise((resolve) => setTimeout(resolve, payload.ms));
    await this.dataSource.query('update limited_runs set ended_at = clock_timestamp() where job_id = $1 and attempt = $2', [ctx.job.id, ctx.job.attempts]);
  }
}

/**
 * `@Task('limited', { globalConcurrency: 2 })` across 3 worker processes at concurrency 10
 * (issue 27.2): the limit is exact, never exceeded and reached, when the three claim a backlog
 * at once, when a NOTIFY wakes them together, and through a SIGKILL of a process holding one of
 * the slots (the slot comes back once the sweep rescues its job).
 */
describe('globalConcurrency across worker processes', () => {
  const s = processSuite('global_concurrency', { externalTasks: ['limited'], tables: [LIMITED_RUNS_TABLE] });

  const add = async (count: number, ms: number) =>
    (await s.t.jobs.addMany(Array.from({ length: count }, (_, n) => ({ identifier: 'limited' as never, payload: { ms, n } as never })))).map((job) => job.id);

  it('three processes claiming at once run at most 2 at a time, and reach 2; every job runs once', async () => {
    // A backlog before the processes start: their first claims race for it.
    const backlog = await add(24, 150);
    await s.start(3, { concurrency: 10, env: { LIMITED: '1' } });
    await waitFor('the backlog to run', async () => (await ended(s.sql, backlog)) === backlog.length);
    // Added while all three are idle: the NOTIFY wakes the three claims together.
    const woken = await add(24, 150);
    await waitFor('the second batch to run', async () => (await ended(s.sql, woken)) === woken.length);

    for (const [what, ids] of [['backlog', backlog], ['second batch', woken]] as const) {
      assert.equal(await mostAtOnce(s.sql, ids), 2, `${what}: the most at once is the limit`);
    }
    const all = [...backlog, ...woken];
    const { rows } = await s.sql.query<{ runs: number; jobs: number; pids: number }>(
      'select count(*)::int as runs, count(distinct job_id)::int as jobs, count(distinct pid)::int as pids from limited_runs where job_id = any($1::bigint[])',
      [all],
    );
    assert.deepEqual({ runs: rows[0].runs, jobs: rows[0].jobs }, { runs: all.length, jobs: all.length }, 'each job ran once');
  });

  it('three processes of one slot each: two hold the limit\'s slots at once, the third claims none meanwhile', async () => {
    // At concurrency 1 a process holds one job at most (no prefetch beyond its slot and the limit), so 2 at once are 2 processes.
    await s.start(3, { concurrency: 1, env: { LIMITED: '1' } });
    const ids = await add(24, 150);
    await waitFor('the jobs to run', async () => (await ended(s.sql, ids)) === ids.length);
    assert.equal(await mostAtOnce(s.sql, ids), 2);
    const { rows } = await s.sql.query<{ pids: number; runs: number }>('select count(distinct pid)::int as pids, count(*)::int as runs from limited_runs where job_id = any($1::bigint[])', [ids]);
    assert.ok(rows[0].pids >= 2, `more than one process ran them (${rows[0].pids})`);
    assert.equal(rows[0].runs, ids.length, 'each job ran once');
  });

  it('a process killed holding a slot: never more than 2, and the slot comes back after the rescue', async () => {
    const processes = await s.start(3, { concurrency: 10, env: { LIMITED: '1', HEARTBEAT_INTERVAL: '250', WORKER_TIMEOUT: '2000' } });
    const ids = await add(10, 700);
    let running: { pid: number; job_id: string } | undefined;
    await waitFor('an attempt to run', async () => {
      const { rows } = await s.sql.query<{ pid: number; job_id: string }>('select pid, job_id::text from limited_runs where job_id = any($1::bigint[]) and ended_at is null limit 1', [ids]);
      running = rows[0];
      return running !== undefined;
    });
    const victim = processes.find((p) => p.pid === running!.pid)!;
    await victim.kill();
    const { rows: [{ now: killedAt }] } = await s.sql.query<{ now: Date }>('select clock_timestamp() as now');
    await waitFor('every job to run to its end', async () => (await ended(s.sql, ids)) === ids.length);

    assert.equal(await mostAtOnce(s.sql, ids, killedAt), 2, 'never more than 2 at once, the killed attempt counted until the kill');
    assert.equal(await mostAtOnce(s.sql, ids, killedAt, killedAt), 2, 'after the kill, 2 at once again: the dead worker\'s slot came back with the rescue');
    const { rows: again } = await s.sql.query<{ pid: number; attempt: number }>('select pid, attempt from limited_runs where job_id = $1 and ended_at is not null', [running!.job_id]);
    assert.equal(again.length, 1);
    assert.notEqual(again[0].pid, victim.pid, 'the killed attempt\'s job ran again elsewhere');
  });
});

describe('globalConcurrency in one process', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  let t: TestApp | undefined;

  before(async () => {
    db = await createTestDatabase('global_concurrency_local');
    sql = await connect(db.url);
    await sql.query('create table limited_runs (job_id bigint not null, pid int not null, attempt int not null, started_at timestamptz not null, ended_at timestamptz)');
  });
  after(async () => {
    await t?.close();
    await sql?.end();
    await db?.drop();
  });

  it('a limited task never starts at its add (local start): its claim counts the slots', async () => {
    t = await createTestApp({ url: db.url, providers: [SoloTasks], jobQueue: { concurrency: 4, pollInterval: 200 } });
    const ids: string[] = [];
    for (let n = 0; n < 4; n += 1) {
      const job = await t.jobs.add('solo' as never, { ms: 100 } as never);
      assert.notEqual(job.state, 'running', 'not started at its add');
      ids.push(job.id);
    }
    await waitFor('the jobs to run', async () => (await ended(sql, ids)) === ids.length);
    assert.equal(await mostAtOnce(sql, ids), 1);
  });

  for (const bad of [0, -1, 1.5, Number.NaN, '2', null]) {
    it(`globalConcurrency ${typeof bad === 'string' ? JSON.stringify(bad) : String(bad)}: JQ_INVALID_LIMIT at startup`, async () => {
      @Injectable()
      class BadLimit {
        async run() {}
      }
      Task('bad', { globalConcurrency: bad as number })(BadLimit.prototype, 'run', Object.getOwnPropertyDescriptor(BadLimit.prototype, 'run')!);
      await assert.rejects(createTestApp({ url: db.url, providers: [BadLimit], jobQueue: { worker: false } }), { code: 'JQ_INVALID_LIMIT' });
    });
  }
});
