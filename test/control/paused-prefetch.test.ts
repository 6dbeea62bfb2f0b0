import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Client } from 'pg';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { connect } from '../support/database';
import { waitFor } from '../support/wait';

/** Each run of a job, by id: when it started (Date.now()). */
const runs = new Map<string, number[]>();
let openGate: () => void = () => undefined;

@Injectable()
class PrefetchTasks {
  @Task('quick')
  quick(_payload: unknown, ctx: JobContext) {
    runs.set(ctx.job.id, [...(runs.get(ctx.job.id) ?? []), Date.now()]);
  }

  /** Holds the worker's one slot until the test opens the gate. */
  @Task('slow')
  async slow() {
    await new Promise<void>((resolve) => (openGate = resolve));
  }

  /** Told 429 at its first run when it asks (`retryAfter`, ms). */
  @Task('partner')
  partner(payload: { retryAfter?: number }, ctx: JobContext) {
    const seen = runs.get(ctx.job.id) ?? [];
    runs.set(ctx.job.id, [...seen, Date.now()]);
    if (payload.retryAfter !== undefined && seen.length === 0) ctx.rateLimited(payload.retryAfter);
  }
}

/**
 * Jobs a worker claimed ahead (prefetched) of a task that is then paused, or held by
 * ctx.rateLimited, are given back to the table with their attempt returned, and start only
 * after the resume or the hold's end (worker/paused-give-back.ts). One slot, so that jobs
 * added while `slow` holds it are all claimed ahead.
 */
describe('prefetched jobs of a paused or held task', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => {
    ({ db, sql, t } = await openTestApp('paused_prefetch', { providers: [PrefetchTasks], jobQueue: { concurrency: 1, pollInterval: 200, heartbeatInterval: 500 } }));
  });
  afterEach(async () => {
    openGate();
    for (const entry of await t.jobs.listPaused()) if (entry.kind === 'task' && entry.until === undefined) await t.jobs.resumeTask(entry.name);
  });
  after(() => closeTestApp({ db, sql, t }));

  const completed = async (ids: string[]) =>
    (await sql.query<{ n: number }>("select count(*)::int as n from job_queue.finished_jobs where id = any($1::bigint[]) and state = 'completed'", [ids])).rows[0].n;
  /** Fast jobs first, so that the worker prefetches (prefetch.ts sizes it by the jobs' duration), then `slow` in the one slot. */
  const slotHeldWhilePrefetching = async () => {
    const warm = (await t.jobs.addMany(Array.from({ length: 100 }, (_, n) => ({ identifier: 'quick' as const, payload: { n } })))).map((job) => job.id);
    await waitFor('the warm-up jobs to complete', async () => (await completed(warm)) === warm.length);
    const gate = openGate;
    const slow = await t.jobs.add('slow', {});
    await waitFor('slow to start', () => openGate !== gate);
    return slow.id;
  };
  /** Jobs `ids` this worker has claimed ahead: locked for it, not started. */
  const claimedAhead = async (ids: string[]) =>
    (await sql.query<{ id: string }>('select id::text from job_queue.jobs where id = any($1::bigint[]) and locked_by is not null and started_at is null', [ids])).rows.map((r) => r.id);
  /** Jobs `ids` back in the table as if never claimed. */
  const untouched = async (ids: string[]) =>
    (await sql.query<{ n: number }>('select count(*)::int as n from job_queue.jobs where id = any($1::bigint[]) and locked_by is null and attempts = 0', [ids])).rows[0].n;

  it('a pause gives back the jobs claimed ahead: none starts until the resume, then each runs once, its attempt counted once', async () => {
    const slow = await slotHeldWhilePrefetching();
    const quick = (await t.jobs.addMany(Array.from({ length: 20 }, (_, n) => ({ identifier: 'quick' as const, payload: { n } })))).map((job) => job.id);
    let ahead: string[] = [];
    await waitFor('quick jobs to be claimed ahead', async () => (ahead = await claimedAhead(quick)).length > 0);
    await t.jobs.pauseTask('quick');
    await waitFor('the jobs claimed ahead to be given back', async () => (await untouched(ahead)) === ahead.length);
    openGate();
    await waitFor('slow to complete', async () => (await completed([slow])) === 1);
    const marker = await t.jobs.add('partner', {});
    await waitFor('a job of another task to run after that', () => runs.has(marker.id));
    assert.deepEqual(quick.filter((id) => runs.has(id)), [], 'no job of the paused task started');
    assert.equal(await untouched(quick), quick.length, 'every job of the paused task waits in the table, no attempt spent');

    await t.jobs.resumeTask('quick');
    await waitFor('the quick jobs to complete after the resume', async () => (await completed(quick)) === quick.length);
    assert.deepEqual([...new Set(quick.map((id) => runs.get(id)?.length))], [1], 'each ran once');
    const { rows } = await sql.query<{ attempts: number }>('select distinct attempts from job_queue.finished_jobs where id = any($1::bigint[])', [quick]);
    assert.deepEqual(rows, [{ attempts: 1 }]);
  });

  it('a job claimed ahead whose row another transaction has locked is given back after that commits, at the next heartbeat', async () => {
    const slow = await slotHeldWhilePrefetching();
    const quick = (await t.jobs.addMany(Array.from({ length: 5 }, (_, n) => ({ identifier: 'quick' as const, payload: { n } })))).map((job) => job.id);
    let ahead: string[] = [];
    await waitFor('quick jobs to be claimed ahead', async () => (ahead = await claimedAhead(quick)).length > 1);
    const [locked, ...free] = ahead;
    const other = await connect(db.url);
    try {
      await other.query('begin');
      await other.query('select 1 from job_queue.jobs where id = $1 for update', [locked]);
      await t.jobs.pauseTask('quick');
      await waitFor('the others claimed ahead to be given back', async () => (await untouched(free)) === free.length);
      assert.deepEqual(await claimedAhead([locked]), [locked], 'the locked one is still held, not given back');
      await other.query('commit');
    } finally {
      await other.end();
    }
    await waitFor('the locked one to be given back once its row is free', async () => (await untouched([locked])) === 1);
    openGate();
    await waitFor('slow to complete', async () => (await completed([slow])) === 1);
    const marker = await t.jobs.add('partner', {});
    await waitFor('a job of another task to run after that', () => runs.has(marker.id));
    assert.deepEqual(quick.filter((id) => runs.has(id)), [], 'no job of the paused task started');
    await t.jobs.resumeTask('quick');
    await waitFor('the quick jobs to complete after the resume', async () => (await completed(quick)) === quick.length);
    assert.deepEqual([...new Set(quick.map((id) => runs.get(id)?.length))], [1], 'each ran once');
  });

  it("a hold (ctx.rateLimited) gives back the task's jobs claimed ahead: none starts before the hold's end", async () => {
    const slow = await slotHeldWhilePrefetching();
    const [limited, ...others] = (
      await t.jobs.addMany([{ identifier: 'partner' as const, payload: { retryAfter: 3000 } }, ...Array.from({ length: 10 }, () => ({ identifier: 'partner' as const, payload: {} }))])
    ).map((job) => job.id);
    await waitFor('the partner jobs to be claimed ahead', async () => (await claimedAhead([limited, ...others])).length === others.length + 1);
    openGate();
    await waitFor('slow to complete', async () => (await completed([slow])) === 1);
    let until: Date | undefined;
    await waitFor('the hold to be listed', async () => (until = (await t.jobs.listPaused()).find((p) => p.name === 'partner')?.until) !== undefined);
    await waitFor('the others to be given back', async () => (await untouched(others)) === others.length);

    await waitFor('every partner job to complete after the hold', async () => (await completed([limited, ...others])) === others.length + 1, 30_000);
    const early = others.filter((id) => runs.get(id)!.some((at) => at < until!.getTime() - 100));
    assert.deepEqual(early, [], `no other job of the held task started before the hold's end ${until!.toISOString()}`);
    assert.deepEqual([...new Set(others.map((id) => runs.get(id)!.length))], [1], 'each ran once');
    assert.equal(runs.get(limited)!.length, 2, 'the limited job ran again after the hold');
    const { rows } = await sql.query<{ attempts: number }>('select distinct attempts from job_queue.finished_jobs where id = any($1::bigint[])', [[limited, ...others]]);
    assert.deepEqual(rows, [{ attempts: 1 }], 'no attempt spent by the hold or the give-back');
  });
});
