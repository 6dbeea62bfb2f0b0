import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Client } from 'pg';
import { DataSource } from 'typeorm';
import { createJobQueueMigrations, runJobQueueMigrations } from '../../libs/job-queue/src';
import { connect, createTestDatabase } from '../support/database';
import type { Fault } from './faults';
import { Checker, type Check } from './invariants';
import { createLedger } from './ledger';

const T0 = Date.parse('2026-11-27T00:00:00Z');
const at = (ms: number) => new Date(T0 + ms);

/**
 * The chaos checker (invariants.ts) fails on the histories it must fail on: a ledger written
 * by hand with one violation each, and the same history with the fault that explains it.
 * A checker that cannot fail is worth nothing (issue 29).
 */
describe('the chaos checker', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;

  before(async () => {
    db = await createTestDatabase('chaos_checker');
    const dataSource = new DataSource({ type: 'postgres', url: db.url });
    await dataSource.initialize();
    await runJobQueueMigrations(dataSource, 'job_queue', createJobQueueMigrations());
    await dataSource.destroy();
    sql = await connect(db.url);
  });
  beforeEach(async () => {
    await sql.query('drop schema if exists chaos cascade');
    await createLedger(sql);
  });
  after(async () => {
    await sql?.end();
    await db?.drop();
  });

  async function attempt(key: string, kind: string, pid: number, from: number, to: number, options: { queue?: string; effect?: boolean; jobId?: number; attempt?: number } = {}) {
    const [{ id }] = (
      await sql.query(
        `insert into chaos.attempts (key, kind, job_id, queue_name, attempt, pid, started_at, ended_at, outcome) values ($1, $2, $3, $4, $8, $5, $6, $7, 'ok') returning id`,
        [key, kind, options.jobId ?? 1, options.queue ?? null, pid, at(from), at(to), options.attempt ?? 1],
      )
    ).rows;
    if (options.effect) await sql.query('insert into chaos.effects (attempt_id, key, job_id, at) values ($1, $2, $3, $4)', [id, key, options.jobId ?? 1, at(to)]);
  }

  async function check(name: string, faults: Fault[] = []): Promise<Check> {
    const checks = await new Checker(sql, faults, [], {}).run();
    const found = checks.find((c) => c.name.startsWith(name));
    assert.ok(found, `a check named "${name}…"`);
    return found;
  }

  const kill = (pid: number, ms: number): Fault => ({ kind: 'kill', pid, startedAt: at(ms), endedAt: at(ms + 10) });

  it('a job run twice is a violation, unless a fault on the first run\'s process explains it', async () => {
    await sql.query(`insert into chaos.produced (key, kind, job_id, expect) values ('p1', 'plain', 1, 'completed')`);
    await attempt('p1', 'plain', 100, 0, 50);
    await attempt('p1', 'plain', 200, 4000, 4050);
    assert.match((await check('no job ran twice')).violations.join('\n'), /p1 ran twice/);
    const explained = await check('no job ran twice', [kill(100, 60)]);
    assert.deepEqual(explained.violations, []);
    assert.match(explained.counts, /1 second runs explained \(kill 1\)/);
    assert.equal((await check('no job ran twice', [kill(300, 60)])).violations.length, 1, 'a fault on another process explains nothing');
    const stale: Fault = { kind: 'freeze-long', pid: 200, startedAt: at(-2000), endedAt: at(3990) };
    assert.deepEqual((await check('no job ran twice', [stale])).violations, [], 'nor does one on the second run\'s process, frozen with the job claimed');
    // declared dead by the cluster with no fault injected (a heartbeat late under load): the leader's rescue shows it
    await sql.query(`insert into chaos.worker_events (pid, type, job_id, dead_worker, at) values (300, 'job:rescued', 1, 'vm-100-1a2b3c4d', $1)`, [at(3000)]);
    const declared = await check('no job ran twice');
    assert.deepEqual(declared.violations, []);
    assert.match(declared.counts, /\(declared-dead 1\)/);
  });

  it('a transactional run whose writes rolled back is no run: only committed writes count', async () => {
    await attempt('t1', 'queued', 100, 0, 50, { queue: 'q' });
    await attempt('t1', 'queued', 100, 1500, 1550, { queue: 'q', effect: true });
    assert.deepEqual((await check('no job ran twice')).violations, []);
    await attempt('t1', 'queued', 200, 2000, 2050, { queue: 'q', effect: true });
    assert.match((await check('no job ran twice')).violations.join('\n'), /t1 ran twice/);
  });

  it('two attempts of one named queue at once are a violation', async () => {
    await attempt('q1', 'queued', 100, 0, 100, { queue: 'q', effect: true, jobId: 1 });
    await attempt('q2', 'queued', 200, 50, 150, { queue: 'q', effect: true, jobId: 2 });
    assert.match((await check('named queues')).violations.join('\n'), /q1 and q2 both committed, overlapping/);
  });

  it('a stale run overlapping the rerun is allowed only if it was cut off and its write refused', async () => {
    await attempt('q1', 'queued', 100, 0, 5000, { queue: 'q' });
    await attempt('q1', 'queued', 200, 3500, 3600, { queue: 'q', effect: true });
    assert.equal((await check('named queues')).violations.length, 1, 'no fault: a violation');
    assert.deepEqual((await check('named queues', [{ kind: 'freeze-long', pid: 100, startedAt: at(10), endedAt: at(4500) }])).violations, []);
    // started by a process the cluster had declared dead (a job claimed before a stall, started on waking)
    await sql.query(`insert into chaos.worker_events (pid, type, job_id, dead_worker, at) values (300, 'job:rescued', 1, 'vm-100-1a2b3c4d', $1)`, [at(-500)]);
    assert.deepEqual((await check('named queues')).violations, []);
  });

  it('more limited attempts at once than globalConcurrency is a violation, not counting a killed process after its kill', async () => {
    await attempt('l1', 'limited', 100, 0, 1000);
    await attempt('l2', 'limited', 200, 100, 1000);
    await attempt('l3', 'limited', 300, 200, 1000);
    assert.match((await check('globalConcurrency')).violations.join('\n'), /3 attempts at once/);
    assert.deepEqual((await check('globalConcurrency', [kill(100, 150)])).violations, []);
  });

  it('a run of a job whose add was rolled back is a violation', async () => {
    await sql.query(`insert into chaos.rolled_back (key, kind) values ('r1', 'plain')`);
    await attempt('r1', 'plain', 100, 0, 10);
    assert.match((await check('nothing rolled back')).violations.join('\n'), /r1 \(plain, job 1\) ran/);
  });

  it('a committed job that never ended, and a missed cron tick, are violations', async () => {
    await sql.query(`insert into chaos.produced (key, kind, job_id, expect) values ('lost', 'plain', 42, 'completed')`);
    assert.match((await check('every committed job ended')).violations.join('\n'), /lost \(plain\) ended never, expected completed/);
    await attempt('tick:2026-11-27T00:00:00.000Z', 'tick', 100, 0, 10, { jobId: 1 });
    await attempt('tick:2026-11-27T00:00:02.000Z', 'tick', 100, 2000, 2010, { jobId: 2 });
    assert.match((await check('cron')).violations.join('\n'), /tick 2026-11-27T00:00:01.000Z never ran/);
  });

  it('a job meant to succeed that failed is a violation, unless faults took some of its attempts', async () => {
    const failed = async (id: number, key: string, errors: Array<{ message: string; code: string | null }>) => {
      await sql.query(`insert into chaos.produced (key, kind, job_id, expect) values ($1, 'plain', $2, 'completed')`, [key, id]);
      await sql.query(
        `insert into job_queue.finished_jobs (id, task_identifier, payload, priority, run_at, attempts, max_attempts, flags, state, errors, created_at)
         values ($1, 'chaos.plain', '{}', 0, now(), 3, 3, '{}', 'failed', $2, now())`,
        [id, JSON.stringify(errors.map((e, i) => ({ at: new Date().toISOString(), attempt: i + 1, ...e })))],
      );
    };
    await failed(7, 'own', [1, 2, 3].map((n) => ({ message: `attempt ${n} fails on purpose`, code: null })));
    await failed(8, 'lost', [
      { message: 'attempt 1 fails on purpose', code: null },
      { message: 'worker lost', code: 'JQ_WORKER_LOST' },
      { message: 'attempt 3 fails on purpose', code: null },
    ]);
    const ended = await check('every committed job ended');
    assert.deepEqual(ended.violations, ['own (plain) ended failed, expected completed']);
    assert.match(ended.counts, /attempts lost to faults: JQ_WORKER_LOST 1/);
  });

  it('a job completed by a worker that did not run its last claim is a violation (the fence)', async () => {
    await sql.query(`insert into chaos.produced (key, kind, job_id, expect) values ('f1', 'plain', 9, 'completed')`);
    await sql.query(
      `insert into job_queue.finished_jobs (id, task_identifier, payload, priority, run_at, attempts, max_attempts, flags, state, worker_id, created_at)
       values (9, 'chaos.plain', '{}', 0, now(), 2, 3, '{}', 'completed', 'vm-100-1a2b3c4d', now())`,
    );
    await attempt('f1', 'plain', 100, 0, 50, { jobId: 9, attempt: 1 });
    await attempt('f1', 'plain', 200, 4000, 4050, { jobId: 9, attempt: 2 });
    assert.match((await check('each completed job')).violations.join('\n'), /f1 was completed by vm-100-1a2b3c4d, which did not run its attempt 2/);
    await attempt('f1', 'plain', 100, 5000, 5050, { jobId: 9, attempt: 2 });
    assert.deepEqual((await check('each completed job')).violations, []);
  });
});
