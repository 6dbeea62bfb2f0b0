import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { Task, type JobContext } from '../../libs/job-queue/src';
import { JobQueueDashboardModule } from '../../libs/job-queue/src/dashboard';
import { closeTestApp, createTestApp, openTestApp, PLATFORMS, type TestApp, type TestAppContext } from '../support/app';
import { OperatorGuard } from '../support/operator-guard';
import { launchBrowser, operatorPage, screenshotPath } from '../support/browser';
import { waitFor } from '../support/wait';

@Injectable()
class LimitedTasks {
  @Task('call_partner', { rateLimit: { max: 10, per: '1m' } })
  async call() {}

  @Task('export_report', { globalConcurrency: 2 })
  async export() {}

  /** Told 429 by its partner: holds the task for an hour. */
  @Task('partner_429')
  async refused(_payload: unknown, ctx: JobContext) {
    ctx.rateLimited('1h');
  }
}

/**
 * The dashboard's tasks page in a real browser (issue 27.5): each task's limits (in force,
 * declared, set at run time) and state (active, paused, held by ctx.rateLimited), and its
 * buttons: pause and resume a task, every task and a named queue; set a task's limits by the
 * form and reset them; a bad limit refused with its message and nothing written. Each checked
 * in the database. A read-only dashboard shows no button and refuses the actions.
 */
for (const platform of PLATFORMS) describe(`dashboard: tasks page (${platform})`, () => {
  let ctx: TestAppContext;
  let browser: Browser | undefined;
  let context: BrowserContext;
  let page: Page;
  let base: string;

  before(async () => {
    ctx = await openTestApp(`dashboard_tasks_${platform}`, {
      providers: [LimitedTasks, OperatorGuard],
      imports: [JobQueueDashboardModule.forRoot({ path: 'admin/jobs', guard: OperatorGuard })],
      http: { globalPrefix: 'api', platform },
      jobQueue: { pollInterval: 200 },
    });
    base = `${ctx.t.url}/api/admin/jobs`;
  });
  after(async () => {
    await browser?.close();
    await closeTestApp(ctx);
  });

  async function openOperatorPage(t: TestContext): Promise<boolean> {
    browser ??= await launchBrowser(t);
    if (!browser) return false;
    ({ context, page } = await operatorPage(browser, ctx.t.url!));
    return true;
  }

  const row = (task: string) => page.locator(`tr[data-task="${task}"]`);
  const override = async (task: string) => (await ctx.t.jobs.listTaskLimits()).find((entry) => entry.task === task)?.override ?? null;

  it('shows limits and states; pauses, resumes, sets and resets by its buttons', async (t) => {
    if (!(await openOperatorPage(t))) return;
    const held = await ctx.t.jobs.add('partner_429' as never, {} as never);
    await waitFor('the hold to be written', async () => (await ctx.t.jobs.listPaused()).some((p) => p.name === 'partner_429'));
    await page.goto(`${base}/tasks`);
    assert.equal(await page.locator('h1').innerText(), 'Tasks');
    assert.equal(await row('call_partner').locator('[data-limits]').innerText(), '10 per 1 min 0 s');
    assert.equal(await row('export_report').locator('[data-limits]').innerText(), '2 at once');
    assert.equal(await row('partner_429').getAttribute('data-state'), 'held');
    assert.match(await row('partner_429').innerText(), /Held until in (59|60) min/);
    await page.screenshot({ path: screenshotPath(platform, 'tasks-1') });

    // pause and resume a task
    await row('call_partner').locator('button:has-text("Pause")').click();
    await page.waitForURL(/done=task-paused/);
    assert.deepEqual((await ctx.t.jobs.listPaused()).filter((p) => p.name === 'call_partner').map((p) => [p.kind, p.until]), [['task', undefined]]);
    assert.equal(await row('call_partner').getAttribute('data-state'), 'paused');
    await row('call_partner').locator('button:has-text("Resume")').click();
    await page.waitForURL(/done=task-resumed/);
    assert.equal((await ctx.t.jobs.listPaused()).some((p) => p.name === 'call_partner'), false);
    // the hold lifted by Resume (the job itself waits for the end of its snooze, an hour)
    await row('partner_429').locator('button:has-text("Resume")').click();
    await page.waitForURL(/done=task-resumed/);
    assert.equal((await ctx.t.jobs.listPaused()).some((p) => p.name === 'partner_429'), false);
    assert.equal(await row('partner_429').getAttribute('data-state'), 'active');
    assert.equal((await ctx.t.jobs.getJob(held.id))?.state, 'scheduled', 'the rate-limited job waits for its own retryAfter, its attempt not spent');

    // limits set by the form, shown, then reset
    const form = row('export_report').locator('form.limits');
    await form.locator('input[name="globalConcurrency"]').fill('3');
    await form.locator('input[name="rateMax"]').fill('5');
    await form.locator('input[name="ratePer"]').fill('1s');
    await form.locator('input[name="groupConcurrency"]').fill('1');
    await form.locator('input[name="groupRateMax"]').fill('2');
    await form.locator('input[name="groupRatePer"]').fill('1m');
    await form.locator('button:has-text("Set")').click();
    await page.waitForURL(/done=limits-set/);
    assert.deepEqual(await override('export_report'), { globalConcurrency: 3, rateLimit: { max: 5, perMs: 1000 }, groupConcurrency: 1, groupRateLimit: { max: 2, perMs: 60_000 } });
    assert.equal(await row('export_report').locator('[data-limits]').innerText(), '3 at once, 5 per 1.0 s, 1 at once per group, 2 per 1 min 0 s per group');
    await page.screenshot({ path: screenshotPath(platform, 'tasks-2-limits-set') });
    await row('export_report').locator('button:has-text("Reset")').click();
    await page.waitForURL(/done=limits-reset/);
    assert.equal(await override('export_report'), null);
    assert.equal(await row('export_report').locator('[data-limits]').innerText(), '2 at once');

    // a bad limit: the page says why, nothing is written
    await row('export_report').locator('input[name="globalConcurrency"]').fill('0');
    await row('export_report').locator('form.limits button').click();
    await page.waitForURL(/error=JQ_INVALID_LIMIT/);
    assert.match(await page.locator('.flash.error').innerText(), /Not a limit/);
    assert.equal(await override('export_report'), null);

    // a named queue paused by name and resumed; every task paused and resumed
    await page.locator('input[name="queue"]').fill('crm');
    await page.locator('button:has-text("Pause queue")').click();
    await page.waitForURL(/done=queue-paused/);
    assert.deepEqual((await ctx.t.jobs.listPaused()).filter((p) => p.kind === 'queue').map((p) => p.name), ['crm']);
    await page.locator('tr[data-queue="crm"] button:has-text("Resume")').click();
    await page.waitForURL(/done=queue-resumed/);
    assert.deepEqual((await ctx.t.jobs.listPaused()).filter((p) => p.kind === 'queue'), []);
    await page.locator('button:has-text("Pause every task")').click();
    await page.waitForURL(/done=task-paused/);
    assert.ok((await ctx.t.jobs.listPaused()).some((p) => p.name === '*'));
    assert.equal(await page.locator('[data-paused-all="yes"]').count(), 1);
    await page.screenshot({ path: screenshotPath(platform, 'tasks-3-all-paused') });
    await page.locator('button:has-text("Resume all")').click();
    await page.waitForURL(/done=task-resumed/);
    assert.equal((await ctx.t.jobs.listPaused()).some((p) => p.name === '*'), false);
    await context.close();
  });

  it('a read-only dashboard shows the limits and no button, and refuses the actions', async () => {
    let app: TestApp | undefined;
    try {
      app = await createTestApp({ url: ctx.db.url, imports: [JobQueueDashboardModule.forRoot({ public: true, readOnly: true })], http: { platform }, jobQueue: { worker: false, externalTasks: '*' } });
      const html = await (await fetch(`${app.url}/queue/tasks`)).text();
      assert.match(html, /data-task="partner_429"/, 'a task of another app with jobs is listed');
      assert.doesNotMatch(html, /<form|<button|name="globalConcurrency"/, 'no action on a read-only tasks page');
      const cookie = 'jq_dashboard_csrf=0123456789abcdef0123456789abcdef';
      for (const path of ['tasks/call_partner/pause', 'tasks/call_partner/limits', 'queues/pause']) {
        const post = await fetch(`${app.url}/queue/${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', cookie },
          body: '_csrf=0123456789abcdef0123456789abcdef&globalConcurrency=1&queue=crm',
        });
        assert.equal(post.status, 403, path);
      }
      assert.deepEqual(await ctx.t.jobs.listPaused(), []);
      assert.equal(await override('call_partner'), null);
    } finally {
      await app?.close();
    }
  });
});
