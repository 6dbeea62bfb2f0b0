import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { gzipSync } from 'node:zlib';
import { after, before, describe, it, type TestContext } from 'node:test';
import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { isJobQueueError, Task, type Job, type JobContext } from '../../libs/job-queue/src';
import { JobQueueDashboardModule } from '../../libs/job-queue/src/dashboard';
import { closeTestApp, createTestApp, openTestApp, PLATFORMS, type TestApp, type TestAppContext } from '../support/app';
import { launchBrowser, operatorPage, screenshotPath } from '../support/browser';
import { waitForValue } from '../support/wait';

/** Page requests held until the other tab's has arrived (?tab=): two tabs opened at once, neither answered before both asked. */
let heldTabs: Array<() => void> = [];
function bothTabsIn(): Promise<void> {
  return new Promise<void>((resolve) => {
    heldTabs.push(resolve);
    if (heldTabs.length < 2) return;
    for (const release of heldTabs) release();
    heldTabs = [];
  });
}

/** The test's guard: operators carry the cookie `operator=yes`. It holds ?tab= pages (bothTabsIn). */
@Injectable()
class OperatorGuard implements CanActivate {
  async canActivate(context: ExecutionContext): Promise<boolean> {
    const { headers, url } = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined>; url: string }>();
    if (!/(^|;\s*)operator=yes(;|$)/.test(headers.cookie ?? '')) return false;
    if (/[?&]tab=/.test(url)) await bothTabsIn();
    return true;
  }
}

const SECRET = 'hunter2-do-not-show';
const state = { failing: true, cancelled: [] as string[] };

@Injectable()
class DashboardTasks {
  /** Completes with a result that carries a token the dashboard must not show. */
  @Task('issue_token')
  issueToken(payload: { user: string; password: string }) {
    return { user: payload.user, token: `${SECRET}-token` };
  }

  /** Fails (one attempt) while `state.failing`; completes once the test lets it. */
  @Task('charge_card', { maxAttempts: 1 })
  charge(payload: { card: string }) {
    if (state.failing) throw Object.assign(new Error(`card ${payload.card.slice(-4)} declined`), { code: 'CARD_DECLINED' });
    return { charged: true };
  }

  /** Runs until cancelled, reporting progress. */
  @Task('long_export')
  async longExport(_payload: unknown, ctx: JobContext) {
    await ctx.progress(40);
    await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    state.cancelled.push(ctx.job.id);
    throw ctx.signal.reason;
  }

  /** A queue's head that keeps failing, retried in an hour: the queue is held up behind it. */
  @Task('sync_crm', { queueName: 'crm', maxAttempts: 5, retryDelay: () => 3_600_000 })
  syncCrm() {
    throw new Error('CRM unavailable');
  }

  @Task('nightly_report')
  @Cron('0 3 * * *', { timeZone: 'Europe/Paris' })
  nightlyReport() {
    return null;
  }
}

/** What `redact` hides: the password of issue_token's payload, and the token of its result. */
function redact(job: Job): Job {
  if (job.taskIdentifier !== 'issue_token') return job;
  const payload = { ...(job.payload as Record<string, unknown>), password: '[redacted]' };
  const result = job.result && { ...(job.result as Record<string, unknown>), token: '[redacted]' };
  return { ...job, payload, result };
}

/**
 * The dashboard in a real browser (headless Chromium), on an app listening on a port, as an
 * operator uses it: overview, filter, open a job, retry it, cancel a running job; the cron
 * and workers pages; and what a request the guard refuses, or a cross-site one, gets.
 */
for (const platform of PLATFORMS) describe(`dashboard (${platform})`, () => {
  let ctx: TestAppContext;
  let browser: Browser | undefined;
  let context: BrowserContext;
  let page: Page;
  let base: string;
  const ids: Record<string, string> = {};
  /** Every URL the browser asked for: nothing may come from outside the app. */
  const requested: string[] = [];

  before(async () => {
    Object.assign(state, { failing: true, cancelled: [] });
    ctx = await openTestApp(`dashboard_${platform}`, {
      providers: [DashboardTasks, OperatorGuard],
      imports: [JobQueueDashboardModule.forRoot({ path: 'admin/jobs', guard: OperatorGuard, redact })],
      http: { globalPrefix: 'api', platform },
      jobQueue: { pollInterval: 200 },
    });
    base = `${ctx.t.url}/api/admin/jobs`;
    const { jobs } = ctx.t;
    ids.token = (await jobs.add('issue_token', { user: 'ada', password: SECRET })).id;
    ids.charge = (await jobs.add('charge_card', { card: '4242424242424242' })).id;
    ids.export = (await jobs.add('long_export', {})).id;
    await jobs.waitForJob(ids.token, { timeout: '10s' });
    await assert.rejects(jobs.waitForJob(ids.charge, { timeout: '10s' }), (error) => isJobQueueError(error, 'JQ_JOB_FAILED'));
    await waitForValue(ctx.sql, 'the export to run', 'select count(*)::int from job_queue.jobs where id = $1 and started_at is not null', 1, [ids.export]);
    const [head, behind] = await jobs.addMany([{ identifier: 'sync_crm', payload: { n: 1 } }, { identifier: 'sync_crm', payload: { n: 2 } }]);
    ids.crmHead = head.id;
    ids.crmBehind = behind.id;
    await waitForValue(ctx.sql, 'the head of queue crm to fail once, its attempt released', 'select attempts from job_queue.jobs where id = $1 and locked_at is null', 1, [head.id]);
  });

  after(async () => {
    await browser?.close();
    await closeTestApp(ctx);
  });

  /** A fresh browser context for the operator (the guard's cookie set), with the page's own dialogs accepted. */
  async function openOperatorPage(t: TestContext): Promise<boolean> {
    browser ??= await launchBrowser(t);
    if (!browser) return false;
    ({ context, page } = await operatorPage(browser, ctx.t.url!));
    page.on('request', (request) => requested.push(request.url()));
    return true;
  }

  it('overview → failed jobs → a job → retry, checked in the database; a running job cancelled', async (t) => {
    if (!(await openOperatorPage(t))) return;

    // Overview: the counts by state and by task, as countJobs() has them
    await page.goto(base);
    const counts = await ctx.t.jobs.countJobs();
    assert.deepEqual(
      await page.locator('.cards .card').evaluateAll((cards) => cards.map((card) => [card.querySelector('.l')!.textContent, card.querySelector('.n')!.textContent])),
      Object.entries(counts.byState).map(([name, n]) => [name, String(n)]),
    );
    assert.equal(counts.byState.failed, 1);
    assert.equal(counts.byState.running, 1);
    // a card per state, all on one row, each in its state's colour (blocked included: flows)
    const cards = await page.locator('.cards .card').evaluateAll((cards) =>
      cards.map((card) => ({ top: card.getBoundingClientRect().top, colour: card.ownerDocument.defaultView!.getComputedStyle(card).getPropertyValue('--c').trim() })),
    );
    assert.equal(new Set(cards.map((card) => card.top)).size, 1, `one row of cards: ${JSON.stringify(cards)}`);
    assert.ok(cards.every((card) => /^#[0-9a-f]{6}$/.test(card.colour)), `every card has its colour: ${JSON.stringify(cards)}`);
    assert.equal(new Set(cards.map((card) => card.colour)).size, cards.length, 'no two states share a colour');
    assert.match(await page.locator('section.tasks').innerText(), /charge_card/);
    // the chart's totals are the finished jobs of the last hour; the held-up queue names its head
    assert.match(await page.locator('.chart .legend').innerText(), /completed 1\s+failed 1/);
    const blocked = await page.locator('section.blocked tbody tr').allInnerTexts();
    assert.equal(blocked.length, 1);
    assert.match(blocked[0], new RegExp(`^crm\\s+#${ids.crmHead} sync_crm · attempt 1/5, retry in (59|60) min\\s+CRM unavailable\\s+1$`));
    await page.screenshot({ path: screenshotPath(platform, '1-overview') });

    // Jobs, filtered to failed ones through the form
    await page.click('nav >> text=Jobs');
    await page.selectOption('select[name=state]', 'failed');
    await page.click('button:has-text("Filter")');
    await page.waitForURL(/state=failed/);
    const listed = await page.locator('table.jobs tbody tr').evaluateAll((rows) => rows.map((row) => row.getAttribute('data-job')));
    assert.deepEqual(listed, [ids.charge], 'only the failed job is listed');
    assert.match(await page.locator('table.jobs').innerText(), /card 4242 declined/);
    await page.screenshot({ path: screenshotPath(platform, '2-jobs-failed') });

    // The failed job: its attempt with the error and its code; then Retry
    await page.click(`a[href="jobs/${ids.charge}"]`);
    await page.waitForURL(new RegExp(`/jobs/${ids.charge}$`));
    const attempts = await page.locator('section.attempts').innerText();
    assert.match(attempts, /CARD_DECLINED/);
    assert.match(attempts, /card 4242 declined/);
    await page.screenshot({ path: screenshotPath(platform, '3-job-failed') });
    state.failing = false;
    await page.click('button:has-text("Retry")');
    await page.waitForURL(/done=retried/);
    assert.match(await page.locator('.flash').innerText(), /Job retried/);
    // in the database: back in jobs, then completed by the worker
    await waitForValue(ctx.sql, 'the retried job to complete', `select count(*)::int from job_queue.finished_jobs where id = $1 and state = 'completed'`, 1, [ids.charge]);
    const [retried] = (await ctx.sql.query(`select attempts, jsonb_array_length(errors) as errors from job_queue.finished_jobs where id = $1`, [ids.charge])).rows;
    assert.deepEqual(retried, { attempts: 1, errors: 1 }, 'the retry ran once more, its first failure kept');

    // The running export: its progress, then Cancel (confirmed), which reaches its handler
    await page.goto(`${base}/jobs/${ids.export}`);
    assert.match(await page.locator('dl.facts').innerText(), /Running[\s\S]*40%/);
    await page.screenshot({ path: screenshotPath(platform, '4-job-running') });
    await page.click('button:has-text("Cancel")');
    await page.waitForURL(/done=cancelled/);
    await waitForValue(ctx.sql, 'the export to end cancelled', `select count(*)::int from job_queue.finished_jobs where id = $1 and state = 'cancelled'`, 1, [ids.export]);
    assert.deepEqual(state.cancelled, [ids.export], "the running handler's signal aborted");
    await page.reload();
    assert.match(await page.locator('h1').innerText(), /cancelled/i);
    assert.match(await page.locator('dl.facts').innerText(), /JQ_JOB_CANCELLED: cancelled from the dashboard/);
    await page.screenshot({ path: screenshotPath(platform, '5-job-cancelled') });
    await context.close();
  });

  it('redact hides what it should; cron and workers pages show every schedule and worker', async (t) => {
    if (!(await openOperatorPage(t))) return;
    await page.goto(`${base}/jobs/${ids.token}`);
    const text = await page.locator('main').innerText();
    assert.doesNotMatch(text, new RegExp(SECRET), 'neither the password nor the token is shown');
    assert.match(await page.locator('pre.payload').innerText(), /"password": "\[redacted\]"/);
    assert.match(await page.locator('pre.result').innerText(), /"token": "\[redacted\]"/);
    assert.match(await page.locator('pre.payload').innerText(), /"user": "ada"/, 'the rest of the payload is shown');
    await page.screenshot({ path: screenshotPath(platform, '6-job-redacted') });
    // the list of jobs found by id shows no payload either
    await page.goto(`${base}/jobs?q=${ids.token}`);
    assert.doesNotMatch(await page.content(), new RegExp(SECRET));

    await page.goto(`${base}/cron`);
    const row = page.locator('tr[data-schedule="nightly_report"]');
    const cells = await row.locator('td').allInnerTexts();
    assert.deepEqual(cells.slice(0, 4), ['nightly_report', 'nightly_report', '0 3 * * *', 'Europe/Paris']);
    const nextTick = new Date((await row.locator('td:nth-child(6) time').getAttribute('datetime'))!);
    const paris = new Intl.DateTimeFormat('en-GB', { timeZone: 'Europe/Paris', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(nextTick);
    assert.equal(paris, '03:00', `the next tick is 3:00 in Paris: ${nextTick.toISOString()}`);
    assert.ok(nextTick.getTime() > Date.now() && nextTick.getTime() <= Date.now() + 86_400_000);
    await page.screenshot({ path: screenshotPath(platform, '7-cron') });
    // a run-time schedule beside it; the declared one paused and resumed by its buttons (form token, confirm)
    await ctx.t.jobs.upsertSchedule(`yearly_${platform}`, { cron: '0 0 1 1 *', identifier: 'charge_card', payload: { card: '0000' } });
    await page.reload();
    assert.deepEqual((await page.locator(`tr[data-schedule="yearly_${platform}"] td`).allInnerTexts()).slice(7, 9), ['run time', 'Active']);
    await row.locator('button:has-text("Pause")').click();
    await page.waitForURL(/done=schedule-paused/);
    assert.equal(await row.getAttribute('data-paused'), 'yes');
    assert.deepEqual((await row.locator('td').allInnerTexts()).slice(5, 9), ['—', await row.locator('td:nth-child(7)').innerText(), 'code', 'Paused']);
    assert.equal((await ctx.t.jobs.listSchedules()).find((s) => s.id === 'nightly_report')?.paused, true);
    await page.screenshot({ path: screenshotPath(platform, '7-cron-paused') });
    await row.locator('button:has-text("Resume")').click();
    await page.waitForURL(/done=schedule-resumed/);
    assert.equal((await ctx.t.jobs.listSchedules()).find((s) => s.id === 'nightly_report')?.paused, false);
    await ctx.t.jobs.removeSchedule(`yearly_${platform}`);

    await page.goto(`${base}/workers`);
    const worker = page.locator(`tr[data-worker="${ctx.t.worker.workerId}"]`);
    const workerCells = await worker.locator('td').allInnerTexts();
    assert.equal(workerCells[2], String(process.pid));
    assert.equal(workerCells[1], hostname());
    await page.screenshot({ path: screenshotPath(platform, '8-workers') });
    // back to the overview by the navigation (the root's own path: Fastify has no route for it with a trailing slash)
    await page.click('nav >> text=Overview');
    await page.waitForURL(base);
    assert.equal(await page.locator('h1').innerText(), 'Overview');
    await context.close();

    const outside = requested.filter((url) => !url.startsWith(`${ctx.t.url}/`) && !url.startsWith('data:'));
    assert.deepEqual(outside, [], 'the pages loaded nothing from outside the app');
    assert.ok(requested.some((url) => url.endsWith('/assets/dashboard.css')) && requested.some((url) => url.endsWith('/assets/dashboard.js')));
    let assets = 0;
    for (const name of ['dashboard.css', 'dashboard.js']) assets += gzipSync(Buffer.from(await (await fetch(`${base}/assets/${name}`)).arrayBuffer())).length;
    assert.ok(assets < 150_000, `the assets weigh ${assets} bytes gzipped`);
  });

  it("two tabs opened at once both act: each page's form token is accepted", async (t) => {
    if (!(await openOperatorPage(t))) return;
    const later = new Date(Date.now() + 3_600_000);
    const jobs = await ctx.t.jobs.addMany([{ identifier: 'charge_card', payload: { card: '1' }, runAt: later }, { identifier: 'charge_card', payload: { card: '2' }, runAt: later }]);
    const second = await context.newPage();
    second.on('dialog', (dialog) => void dialog.accept());
    const tabs: Array<[Page, string]> = [[page, jobs[0].id], [second, jobs[1].id]];
    // the guard answers neither page before both were asked for: neither request carried a token
    await Promise.all(tabs.map(([tab, id], n) => tab.goto(`${base}/jobs/${id}?tab=${n + 1}`)));
    for (const [tab, id] of tabs) {
      const posted = tab.waitForResponse((response) => response.request().method() === 'POST');
      await tab.click('button:has-text("Cancel")');
      assert.equal((await posted).status(), 303, `the cancel of job ${id}, from its own tab`);
      await tab.waitForURL(/done=cancelled/);
    }
    await second.screenshot({ path: screenshotPath(platform, '9-second-tab') });
    const { rows } = await ctx.sql.query(`select id::text, state from job_queue.finished_jobs where id = any($1) order by id`, [jobs.map((job) => job.id)]);
    assert.deepEqual(rows, jobs.map((job) => ({ id: job.id, state: 'cancelled' })));
    await context.close();
  });

  it('a request the guard refuses gets a 403 and no data; an action without the form token is refused', async () => {
    for (const path of ['', '/jobs', `/jobs/${ids.token}`, '/workers', '/cron']) {
      const response = await fetch(`${base}${path}`);
      const body = await response.text();
      assert.equal(response.status, 403, `GET ${path || '/'} without the operator cookie`);
      assert.doesNotMatch(body, /issue_token|ada|hunter2|worker/i, `GET ${path || '/'} shows nothing`);
    }
    const refusedPost = await fetch(`${base}/jobs/${ids.token}/delete`, { method: 'POST' });
    assert.equal(refusedPost.status, 403);

    // the operator's cookie but no form token (a cross-site form cannot read it), or another origin
    const cookie = 'operator=yes; jq_dashboard_csrf=0123456789abcdef0123456789abcdef';
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    const noToken = await fetch(`${base}/jobs/${ids.token}/delete`, { method: 'POST', headers: { ...form, cookie }, body: '' });
    assert.equal(noToken.status, 403);
    const otherSite = await fetch(`${base}/jobs/${ids.token}/delete`, {
      method: 'POST',
      headers: { ...form, cookie, origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' },
      body: '_csrf=0123456789abcdef0123456789abcdef',
    });
    assert.equal(otherSite.status, 403);
    assert.notEqual(await ctx.t.jobs.getJob(ids.token), null, 'the job was not deleted');

    // with both, from the page's own origin: deleted
    const deleted = await fetch(`${base}/jobs/${ids.token}/delete`, {
      method: 'POST',
      headers: { ...form, cookie, origin: ctx.t.url! },
      body: '_csrf=0123456789abcdef0123456789abcdef',
      redirect: 'manual',
    });
    assert.equal(deleted.status, 303);
    assert.equal(deleted.headers.get('location'), `/api/admin/jobs/jobs?done=deleted&n=${ids.token}`);
    assert.equal(await ctx.t.jobs.getJob(ids.token), null, 'the job was deleted');
  });

  it('readOnly hides the actions and refuses them; no guard and no public: true refuses to start', async () => {
    assert.throws(() => JobQueueDashboardModule.forRoot({}), (error) => isJobQueueError(error, 'JQ_DASHBOARD_UNGUARDED'));
    assert.throws(() => JobQueueDashboardModule.forRoot({ public: true, path: '../x' }), (error) => isJobQueueError(error, 'JQ_INVALID_DASHBOARD_OPTIONS'));
    assert.throws(
      () => JobQueueDashboardModule.forRoot({ guard: { nope: true } as unknown as CanActivate }),
      (error) => isJobQueueError(error, 'JQ_INVALID_DASHBOARD_OPTIONS'),
    );
    let app: TestApp | undefined;
    try {
      app = await createTestApp({
        url: ctx.db.url,
        imports: [JobQueueDashboardModule.forRoot({ public: true, readOnly: true })],
        http: { platform },
        jobQueue: { worker: false, externalTasks: '*' },
      });
      const [failed] = (await ctx.t.jobs.addMany([{ identifier: 'charge_card', payload: { card: '1' }, runAt: new Date(Date.now() + 3_600_000) }]));
      const page = await fetch(`${app.url}/queue/jobs/${failed.id}`);
      assert.equal(page.status, 200);
      const html = await page.text();
      assert.match(html, /read-only/);
      assert.doesNotMatch(html, /<form method="post"/, 'no action form');
      const cron = await (await fetch(`${app.url}/queue/cron`)).text();
      assert.match(cron, /data-schedule="nightly_report"/);
      assert.doesNotMatch(cron, /<form method="post"|Pause</, 'no pause button on a read-only cron page');
      const cookie = 'jq_dashboard_csrf=0123456789abcdef0123456789abcdef';
      const post = await fetch(`${app.url}/queue/jobs/${failed.id}/cancel`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', cookie },
        body: '_csrf=0123456789abcdef0123456789abcdef',
      });
      assert.equal(post.status, 403);
      assert.equal((await ctx.t.jobs.getJob(failed.id))?.state, 'scheduled', 'the job was not cancelled');

      // pages of 50, newest first, by the next-page link
      const later = new Date(Date.now() + 3_600_000);
      const added = (await ctx.t.jobs.addMany(Array.from({ length: 60 }, (_, n) => ({ identifier: 'charge_card', payload: { card: String(n) }, runAt: later })))).map((job) => job.id);
      const scheduled = [failed.id, ...added].reverse();
      const listed: string[] = [];
      let next: string | undefined = `${app.url}/queue/jobs?state=scheduled`;
      for (let pages = 0; next; pages++) {
        assert.ok(pages < 3, 'at most two pages');
        const html: string = await (await fetch(next)).text();
        listed.push(...[...html.matchAll(/data-job="(\d+)"/g)].map((match) => match[1]));
        const link: string | undefined = /<a class="button" href="(jobs\?[^"]+)">Next page/.exec(html)?.[1];
        next = link && `${app.url}/queue/${link.replace(/&amp;/g, '&')}`;
      }
      assert.deepEqual(listed, scheduled, 'every scheduled job once, newest first, over two pages');
    } finally {
      await app?.close();
    }
  });
});
