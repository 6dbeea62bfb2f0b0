import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp } from '../support/app';
import { OldWorkerProcess, SCHEDULES_VERSION } from '../support/previous-version';
import { migrationNames, NewTasks, recordRun, upgradeSetup, warningsLogger } from '../support/upgrade';
import { waitFor } from '../support/wait';

const NEW_MIGRATION = 'TaskLimits1764800000000';

/** The new version's `tick`, rate-limited to 2 a second; a job with `retryAfter` is told 429 on its first run (ctx.rateLimited). */
@Injectable()
class RateLimitedTick {
  constructor(private readonly dataSource: DataSource) {}

  @Task('tick', { rateLimit: { max: 2, per: '1s' } })
  async tick(payload: { retryAfter?: number }, ctx: JobContext) {
    const [{ runs }] = await this.dataSource.query('select count(*)::int as runs from runs where job_id = $1', [ctx.job.id]);
    await recordRun(this.dataSource, payload, ctx);
    if (payload.retryAfter !== undefined && runs === 0) ctx.rateLimited(payload.retryAfter);
  }
}

/**
 * A rolling deploy of the release with rate limits and holds (migration 12: `task_starts`,
 * `task_limits`, `pauses.until`) beside a worker of 55a4e3d, which knows none of them
 * (docs/guides/limits.md, "During a rolling deploy"): the migration applies under it; it claims
 * a rate-limited task as any other, its starts not counted; it reads a hold as a pause, and
 * claims the task again once a worker of this release has deleted the hold that is over.
 */
describe('upgrading to migration 12 (rate limits) while a worker of the previous version runs', () => {
  const u = upgradeSetup('upgrade_rate_limits', SCHEDULES_VERSION);
  const { q } = u;
  const ran = async (ids: string[]) => (await q<{ job_id: string; pid: number }>('select job_id::text, pid from runs where job_id = any($1::bigint[]) order by n', [ids]));
  const mostInASecond = async (ids: string[]) =>
    (
      await q<{ most: number }>(
        `with s as (select started_at from job_queue.finished_jobs where id = any($1::bigint[]))
         select max((select count(*) from s o where o.started_at between w.started_at and w.started_at + interval '1 second'))::int as most from s w`,
        [ids],
      )
    )[0].most;

  it('an old worker ignores a rate limit and obeys a hold until it is deleted; new workers keep both', async () => {
    const old = await OldWorkerProcess.start(u.previous, u.db.url);
    const { logger, logs } = warningsLogger();
    const t = (u.app = await createTestApp({ url: u.db.url, providers: [NewTasks, RateLimitedTick], logger, jobQueue: { pollInterval: 200, concurrency: 4, heartbeatInterval: 500 } }));
    assert.ok((await migrationNames(u.sql)).includes(NEW_MIGRATION), `${NEW_MIGRATION} applied`);

    // A hold written by the new worker: the old one reads it as a pause, then claims again once it is deleted.
    const told = await t.jobs.add('tick' as never, { retryAfter: 1500 } as never, { flags: ['new-only'] }); // old-worker.js never claims new-only jobs
    let until: Date | undefined;
    await waitFor('the hold to be listed', async () => {
      until = (await t.jobs.listPaused()).find((p) => p.name === 'tick')?.until;
      return until !== undefined;
    });
    // Added by the new app, not by the old worker, which could start its own add at once (localStart) before it has heard of the hold.
    const afterHold = (await t.jobs.addMany([1, 2, 3, 4].map((n) => ({ identifier: 'tick' as never, payload: { n } as never })))).map((job) => job.id);
    await waitFor('the jobs to run once the hold is over', async () => (await ran([...afterHold, told.id])).length === afterHold.length + 2, 30_000);
    const early = await q('select id from job_queue.finished_jobs where id = any($1::bigint[]) and started_at < $2', [afterHold, until]);
    assert.deepEqual(early, [], 'no worker, old or new, started the held task before the hold ended');
    await waitFor('the hold that is over to be deleted', async () => (await q('select 1 from job_queue.pauses')).length === 0);

    // The rate limit: the old worker claims the task as any other, beyond 2 a second.
    const burst = await old.add([1, 2, 3, 4, 5, 6, 7, 8].map((n) => ({ identifier: 'tick', payload: { burst: n } })));
    await waitFor('the burst to run', async () => (await ran(burst)).length === burst.length, 30_000);
    const byOld = (await ran(burst)).filter((run) => run.pid === old.pid).length;
    assert.ok(byOld > 0, 'the old worker ran some of them');
    await old.terminate();

    // Without old workers, the limit holds.
    const limited = (await t.jobs.addMany([1, 2, 3, 4, 5, 6].map((n) => ({ identifier: 'tick' as never, payload: { n } as never })))).map((job) => job.id);
    await waitFor('the limited jobs to run', async () => (await ran(limited)).length === limited.length, 30_000);
    assert.equal(await mostInASecond(limited), 2, 'at most 2 a second once only new workers run');
    assert.deepEqual(logs, [], 'the new app logged no warning or error');
  });
});
