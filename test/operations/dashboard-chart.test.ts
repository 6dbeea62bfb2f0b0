import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { JobQueueDashboardModule } from '../../libs/job-queue/src/dashboard';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { waitFor } from '../support/wait';

/** The chart's geometry (views/chart.ts): where the bar of minute slot n starts. */
const LEFT = 40;
const STEP = (900 - LEFT) / 60;

interface Bar {
  slot: number;
  title: string;
}

/** The chart's bars: each one's minute slot (0 the oldest, 59 the current minute) and its title. */
function bars(page: string): Bar[] {
  const chart = /<svg viewBox[\s\S]*?<\/svg>/.exec(page)?.[0] ?? '';
  return [...chart.matchAll(/<rect x="([\d.]+)"[^>]*><title>([^<]*)<\/title><\/rect>/g)].map((m) => ({ slot: Math.round((Number(m[1]) - 1 - LEFT) / STEP), title: m[2] }));
}

/**
 * The overview's chart of finished jobs per minute counts and labels minutes on the
 * database's clock, which stamps finished_at: an app whose own clock is off (here 90 minutes
 * behind, as Date.now() tells it) draws the same chart.
 */
describe("dashboard chart on the database's clock", () => {
  let ctx: TestAppContext;

  before(async () => {
    ctx = await openTestApp('dashboard_chart', { imports: [JobQueueDashboardModule.forRoot({ public: true })], http: {}, jobQueue: { worker: false, externalTasks: '*' } });
  });
  after(() => closeTestApp(ctx));

  /** The epoch ms of the database's current minute. */
  const dbMinute = async () => Number((await ctx.sql.query(`select (extract(epoch from date_trunc('minute', now())) * 1000)::bigint::text as m`)).rows[0].m);

  it('3 jobs completed 2 minutes ago and 1 failed 30 minutes ago (database time) are drawn in those minutes, whatever the app clock says', async () => {
    const jobs = await ctx.t.jobs.addMany([1, 2, 3, 4].map(() => ({ identifier: 'report' })));
    await ctx.t.jobs.completeJobs(jobs.slice(0, 3).map((job) => job.id));
    await ctx.t.jobs.permanentlyFailJobs([jobs[3].id], 'broken');
    const { rows } = await ctx.sql.query(
      `update job_queue.finished_jobs set finished_at = date_trunc('minute', now()) - case when state = 'failed' then interval '30 minutes' else interval '2 minutes' end + interval '1 second'
       returning state, (extract(epoch from date_trunc('minute', finished_at)) * 1000)::bigint::text as minute`,
    );
    const minuteOf = (state: string) => Number(rows.find((row) => row.state === state)!.minute);

    const realNow = Date.now;
    let page = '';
    let current = 0;
    // read the page within one minute of the database's clock, so that the slots are known
    await waitFor('a reading of the overview within one database minute', async () => {
      const before = await dbMinute();
      Date.now = () => realNow() - 90 * 60_000;
      try {
        page = await (await fetch(`${ctx.t.url}/queue`)).text();
      } finally {
        Date.now = realNow;
      }
      current = await dbMinute();
      return before === current;
    });

    const label = (minute: number) => new Date(minute).toISOString().slice(11, 16);
    const slotOf = (minute: number) => 59 - (current - minute) / 60_000;
    assert.deepEqual(
      bars(page),
      [
        { slot: slotOf(minuteOf('failed')), title: `${label(minuteOf('failed'))} UTC: 0 completed, 1 failed` },
        { slot: slotOf(minuteOf('completed')), title: `${label(minuteOf('completed'))} UTC: 3 completed, 0 failed` },
      ],
      'a bar in the minute of each, titled with its time',
    );
    assert.match(page, /completed 3<\/span><span><i style="background:#dc2626"><\/i>failed 1</, "the legend's totals of the last hour");
  });
});
