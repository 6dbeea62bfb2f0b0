import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { createTestApp, type TestApp } from '../support/app';
import { connect, createTestDatabase } from '../support/database';
import { waitForNoJobs } from '../support/wait';

const runs = new Map<string, number>();
const byWorker = new Map<string, number>();

@Injectable()
class CountingTasks {
  @Task('count')
  async count(payload: { n: number }, ctx: JobContext) {
    runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
    if (payload.n % 7 === 0) await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

describe('several workers on one database', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let apps: TestApp[];

  before(async () => {
    db = await createTestDatabase('exactly_once');
    apps = await Promise.all(
      [1, 2, 3].map(() => createTestApp({ url: db.url, providers: [CountingTasks], jobQueue: { concurrency: 8 } })),
    );
    for (const t of apps) t.worker.events$.subscribe((e) => e.type === 'job:success' && byWorker.set(t.worker.workerId, (byWorker.get(t.worker.workerId) ?? 0) + 1));
  });
  after(async () => {
    await Promise.all(apps.map((t) => t.close()));
    await db.drop();
  });

  it('run thousands of jobs, each exactly once', async () => {
    const total = 4000;
    const added = [];
    // from two producers at once, in bulk and one by one
    const bulk = apps[0].jobs.addMany(Array.from({ length: total - 200 }, (_, n) => ({ identifier: 'count', payload: { n } })));
    for (let n = 0; n < 200; n++) added.push(apps[1 + (n % 2)].jobs.add('count', { n }));
    const jobs = [...(await bulk), ...(await Promise.all(added))];
    assert.equal(new Set(jobs.map((j) => j.id)).size, total);

    const sql = await connect(db.url);
    await waitForNoJobs(sql);
    await sql.end();
    assert.equal(runs.size, total);
    assert.deepEqual([...new Set(runs.values())], [1], 'no job ran twice');
    for (const job of jobs) assert.equal(runs.get(job.id), 1);
    assert.equal(byWorker.size, 3, 'all three workers took part');
  });
});
