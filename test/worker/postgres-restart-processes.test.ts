/**
 * PostgreSQL restarted under two worker processes that drain jobs while an every-second cron
 * runs, on a server of the test's own: the processes live through it, every job runs once,
 * a completion that could not be written lands after the restart, and the cron owes no tick.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { LATE_TICK_GRACE_MS } from '../../libs/job-queue/src/cron/cron-item';
import { connect } from '../support/database';
import { PrivatePostgres } from '../support/private-postgres';
import { waitFor, waitForValue } from '../support/wait';
import { startWorkerProcesses, stopWorkerProcesses } from '../support/worker-processes';

describe('a PostgreSQL restart under two worker processes and an every-second cron', () => {
  let postgres: PrivatePostgres;
  let sql: Client | undefined;

  before(async () => {
    postgres = await PrivatePostgres.start();
    sql = await connect(postgres.url);
    // `server` is the start time of the server that wrote the row: before or after the restart
    const written = 'at timestamptz not null default clock_timestamp(), server timestamptz not null default pg_postmaster_start_time()';
    await sql.query(`create table runs (job_id bigint not null, pid int not null, attempt int not null, ${written})`);
    await sql.query(`create table ticks (ts timestamptz not null, backfilled boolean not null, job_id bigint not null, pid int not null, ${written})`);
  });
  after(async () => {
    try {
      await stopWorkerProcesses();
    } finally {
      await sql?.end();
      await postgres?.destroy();
    }
  });

  it('the processes live through it, every job runs once, a late completion lands, and no cron tick is missed', async (t) => {
    const workers = await startWorkerProcesses(2, { url: postgres.url, concurrency: 4, env: { CRON: '1' } });
    let db = sql!;
    await waitForValue(db, 'two registered workers', 'select count(*)::int from job_queue.workers', 2);
    await waitForValue(db, 'the cron to tick twice', 'select count(*) >= 2 from ticks', true);

    const total = 3000;
    await db.query(`select job_queue.add_job('record', jsonb_build_object('n', n)) from generate_series(1, $1) n`, [total]);
    await waitForValue(db, 'the drain to be under way', 'select count(*) >= 300 from runs', true);
    // Ahead of the record jobs, so that it starts now and finishes while the server is down:
    // its completion cannot be written until the server is back.
    const { rows: [{ id: sleepId }] } = await db.query(`select id from job_queue.add_job('sleep', '{"ms": 2000}', priority => -1)`);
    const outputs = () => workers.map((w) => w.output).join('\n');
    await waitFor(`the sleep job ${sleepId} to start`, () => outputs().includes(`started sleep ${sleepId}\n`));

    await db.end();
    sql = undefined;
    const marks = workers.map((w) => w.output.length);
    const stopping = Date.now();
    await postgres.stop();
    const stopped = Date.now();
    await assert.rejects(connect(postgres.url), /ECONNREFUSED/, 'the server is down');
    assert.doesNotMatch(outputs(), new RegExp(`finished sleep ${sleepId}\\n`), 'the sleep job was still running when the server went down');
    // Each process has noticed: a connection it tried since the stop was refused.
    await Promise.all(
      workers.map((w, i) =>
        waitFor(`worker process #${w.index} to fail to reconnect`, () => /failed, retrying: connect ECONNREFUSED/.test(w.output.slice(marks[i]))),
      ),
    );
    await waitFor(`the sleep job ${sleepId} to finish while the server is down`, () => outputs().includes(`finished sleep ${sleepId}\n`));
    // Down until each cron scheduler has failed seven times: long enough that retries backing
    // off as the worker's do would sleep past the lateness grace (the 8th came 6.4 s after the
    // 7th, and the ticks owed were lost), and still short: about 3.5 s, as the cron's retries
    // are capped at 1 s (cron-scheduler.ts MAX_RETRY_MS).
    const cronFailures = (i: number) => workers[i].output.slice(marks[i]).match(/cron failed, retrying/g)?.length ?? 0;
    await Promise.all(workers.map((w, i) => waitFor(`worker process #${w.index}'s cron to fail seven times`, () => cronFailures(i) >= 7)));
    const starting = Date.now();
    await postgres.start();
    const started = Date.now();
    t.diagnostic(`stop took ${stopped - stopping} ms, start ${started - starting} ms; the server was down for ${starting - stopped} ms in between`);

    sql = db = await connect(postgres.url);
    await waitForValue(db, 'the record and sleep jobs to drain', `select count(*)::int from job_queue.jobs where task_identifier <> 'tick'`, 0);
    const { rows: [runs] } = await db.query(
      `select count(*)::int as runs, count(distinct job_id)::int as jobs,
              count(*) filter (where server < pg_postmaster_start_time())::int as before,
              count(*) filter (where server = pg_postmaster_start_time())::int as after
         from runs`,
    );
    assert.equal(runs.jobs, total, 'every record job ran');
    assert.equal(runs.runs, total, 'none ran twice');
    assert.ok(runs.before > 0 && runs.after > 0, `the server stopped mid-drain (${runs.before} ran before, ${runs.after} after)`);
    t.diagnostic(`record jobs run before the stop: ${runs.before}, after the restart: ${runs.after}`);
    const sleepStarts = outputs().split(`started sleep ${sleepId}\n`).length - 1;
    assert.equal(sleepStarts, 1, `the sleep job ${sleepId}, whose completion waited for the server, ran once`);
    assert.equal((await db.query('select count(*)::int as n from job_queue.jobs where id = $1', [sleepId])).rows[0].n, 0, 'and its row is gone');

    // Every tick owed up to the restart has run, and the live schedule goes on after it.
    await waitForValue(
      db,
      'the ticks owed up to the restart to run',
      `select count(*)::int from job_queue.jobs where task_identifier = 'tick' and (payload->'_cron'->>'ts')::timestamptz <= $1`,
      0,
      [new Date(started)],
    );
    await waitForValue(db, 'three ticks after the restart', 'select count(*) >= 3 from ticks where ts > $1', true, [new Date(started)]);
    const sinceStart = async (table: string) =>
      (await db.query(`select round(extract(epoch from min(at) - pg_postmaster_start_time()) * 1000)::int as ms from ${table} where server = pg_postmaster_start_time()`)).rows[0].ms;
    t.diagnostic(`from the server's start to the first new run: ${await sinceStart('runs')} ms; to the first new tick: ${await sinceStart('ticks')} ms`);

    const exits = await Promise.all(workers.map((w) => w.terminate()));
    assert.deepEqual(exits, workers.map(() => ({ code: null, signal: 'SIGTERM' })), 'both processes lived until told to stop');

    // Ticks run, and ticks added but not run before the processes stopped: together, every
    // second from the first tick to the last, once each, across the outage.
    const ran = (await db.query(`select (extract(epoch from ts) * 1000)::bigint as ms, backfilled from ticks order by ts`)).rows;
    const queued = (await db.query(`select (extract(epoch from (payload->'_cron'->>'ts')::timestamptz) * 1000)::bigint as ms from job_queue.jobs where task_identifier = 'tick'`)).rows;
    const ranTimes = ran.map((r) => Number(r.ms));
    assert.equal(new Set(ranTimes).size, ranTimes.length, 'no tick ran twice');
    assert.ok(ran.every((r) => r.backfilled === false), 'every tick was added as a live one (the outage is well within the lateness grace)');
    const times = [...ranTimes, ...queued.map((r) => Number(r.ms))].sort((a, b) => a - b);
    assert.equal(new Set(times).size, times.length, 'no tick both ran and is still queued');
    // the premise of what follows: ticks owed are added late only within the grace
    assert.ok(started - stopping < LATE_TICK_GRACE_MS, `the outage (${started - stopping} ms) was within the lateness grace`);
    const gaps = times.slice(1).flatMap((time, i) => (time - times[i] === 1000 ? [] : [`${time - times[i]} ms after ${new Date(times[i]).toISOString()}`]));
    assert.deepEqual(gaps, [], 'every second has its tick, once');
    assert.ok(times[0] < stopping && times.at(-1)! > started, 'the ticks span the outage');
    const { rows: [crontab] } = await db.query(`select (extract(epoch from last_execution) * 1000)::bigint as ms from job_queue.known_crontabs where identifier = 'tick'`);
    assert.equal(Number(crontab.ms), times.at(-1), 'known_crontabs.last_execution is the last tick added');
    t.diagnostic(`${ran.length} ticks ran, ${queued.length} queued at the end`);
  });
});
