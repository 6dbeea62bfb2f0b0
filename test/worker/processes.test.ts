import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { waitFor } from '../support/app';
import { connect, createTestDatabase } from '../support/database';

describe('worker processes', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sql: Client;
  const children: ChildProcess[] = [];

  before(async () => {
    db = await createTestDatabase('processes');
    sql = await connect(db.url);
    await sql.query('create table runs (job_id bigint not null, pid int not null)');
  });
  after(async () => {
    for (const child of children) child.kill('SIGKILL');
    await sql.end();
    await db.drop();
  });

  it('three processes drain thousands of jobs, each exactly once, and stop cleanly on SIGTERM', async () => {
    for (let i = 0; i < 3; i++) {
      const child = spawn(process.execPath, [join(__dirname, '..', 'support', 'worker-process.js')], {
        env: { ...process.env, DATABASE_URL: db.url, CONCURRENCY: '5' },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      children.push(child);
    }
    // the first child to boot creates the tables; wait until all three have registered
    await waitFor(
      async () => (await sql.query(`select count(*)::int as n from pg_tables where schemaname = 'job_queue' and tablename = 'workers'`)).rows[0].n === 1
        && (await sql.query('select count(*)::int as n from job_queue.workers')).rows[0].n === 3,
      30_000,
      'three workers',
    );
    const total = 3000;
    await sql.query(`select job_queue.add_job('record', jsonb_build_object('n', n)) from generate_series(1, $1) n`, [total]);
    await waitFor(async () => (await sql.query('select count(*)::int as n from job_queue.jobs')).rows[0].n === 0, 60_000, 'the queue to drain');

    const { rows: [runs] } = await sql.query('select count(*)::int as runs, count(distinct job_id)::int as jobs, count(distinct pid)::int as pids from runs');
    assert.deepEqual(runs, { runs: total, jobs: total, pids: 3 });

    const exits = children.map((child) => new Promise((resolve) => child.on('exit', resolve)));
    for (const child of children) child.kill('SIGTERM');
    await Promise.all(exits);
    assert.equal((await sql.query('select count(*)::int as n from job_queue.workers')).rows[0].n, 0, 'every worker unregistered');
  });
});
