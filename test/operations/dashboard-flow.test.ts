import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { Injectable } from '@nestjs/common';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { isJobQueueError, Task, type Job, type JobContext } from '../../libs/job-queue/src';
import { JobQueueDashboardModule } from '../../libs/job-queue/src/dashboard';
import { closeTestApp, openTestApp, PLATFORMS, type TestAppContext } from '../support/app';
import { OperatorGuard } from '../support/operator-guard';
import { launchBrowser, operatorPage, screenshotPath } from '../support/browser';
import { decoded, FORM, formOf, tokenCookies } from '../support/dashboard-forms';
import { assertInert, extraTags, PLAIN, startTags, XSS } from '../support/dashboard-markup';
import { waitForValue } from '../support/wait';

const SECRET = 'sk_live_flow_9Tq4';
const OPERATOR = 'operator=yes';

@Injectable()
class FlowTasks {
  /** A flow's root: completes at once. */
  @Task('flow_fetch')
  flowFetch() {
    return { pages: 2 };
  }

  /** A flow's branch: runs until cancelled. */
  @Task('flow_render')
  async flowRender(_payload: unknown, ctx: JobContext) {
    await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    throw ctx.signal.reason;
  }

  /** A flow's last step; added alone, a job that is a flow of its own. */
  @Task('flow_zip')
  flowZip() {
    return null;
  }

  /** Added alone, it continues with a flow_zip job: a chain, whose flow is the first job's id. */
  @Task('flow_continue')
  flowContinue(_payload: unknown, ctx: JobContext) {
    ctx.continueWith('flow_zip', {});
    return 'continued';
  }

  /** Fails for good, with the secret in its error. */
  @Task('flow_login', { maxAttempts: 1 })
  flowLogin(payload: { user: string }) {
    throw new Error(`${payload.user} refused with key ${SECRET}`);
  }

  /** Fails with the error of its variant (markup, or plain text), retried in an hour. */
  @Task('flow_render_invoice', { maxAttempts: 5, retryDelay: () => 3_600_000 })
  flowRenderInvoice(payload: { variant: 'xss' | 'twin' }) {
    throw new Error((payload.variant === 'xss' ? XSS : PLAIN).error);
  }
}

/** What the app hides: the secret, wherever a job's error holds it. */
function redact(job: Job): Job {
  const hide = (text: string) => text.replaceAll(SECRET, '[redacted]');
  return { ...job, lastError: job.lastError && hide(job.lastError), errors: job.errors.map((e) => ({ ...e, message: hide(e.message) })) };
}

/**
 * The dashboard's flow page (flows/:id) over plain HTTP: the flow's state, its jobs by state
 * (their errors through redact) and its edges, its links, 404s, the guard, refs and errors
 * with markup shown as text, and the link to it on its jobs' pages. Then, in headless
 * Chromium, a diamond flow whose states stay put while the test looks (a root completed, a
 * branch running until cancelled, a branch waiting for its run_at, the join blocked), its page
 * opened from a job's.
 */
for (const platform of PLATFORMS) describe(`dashboard: flows (${platform})`, () => {
  let ctx: TestAppContext;
  let base: string;
  let browser: Browser | undefined;
  let context: BrowserContext;
  let page: Page;

  before(async () => {
    ctx = await openTestApp(`dashboard_flow_${platform}`, {
      providers: [FlowTasks, OperatorGuard],
      imports: [JobQueueDashboardModule.forRoot({ guard: OperatorGuard, redact })],
      http: { platform },
      jobQueue: { pollInterval: 200 },
    });
    base = `${ctx.t.url}/queue`;
  });

  after(async () => {
    await browser?.close();
    await closeTestApp(ctx);
  });

  const get = async (path: string) => {
    const response = await fetch(`${base}${path}`, { headers: { cookie: OPERATOR } });
    assert.equal(response.status, 200, `GET ${path}`);
    return response.text();
  };

  /** A fresh browser context for the operator (support/browser.ts operatorPage). */
  async function openOperatorPage(t: TestContext): Promise<boolean> {
    browser ??= await launchBrowser(t);
    if (!browser) return false;
    ({ context, page } = await operatorPage(browser, ctx.t.url!));
    return true;
  }

  /** Waits until job `id` failed an attempt and its worker let it go (it retries in an hour). */
  const failedOnce = (id: string) =>
    waitForValue(ctx.sql, `job ${id} to fail once`, 'select attempts from job_queue.jobs where id = $1 and locked_at is null', 1, [id]);

  it("/flows/:id shows the flow's state, its jobs by state with their errors through redact, and its edges; its links lead to pages; 404 for no flow, 403 for a refused request", async () => {
    const { jobs } = ctx.t;
    // the root fails for good with the secret in its error; its dependent fails with it
    const flow = await jobs.addFlow([
      { ref: 'login', identifier: 'flow_login', payload: { user: 'eve' } },
      { ref: 'report', identifier: 'flow_zip', payload: {}, dependsOn: ['login'] },
    ]);
    // two waiting roots: the second is a job of the first's flow, not a flow of its own
    const later = new Date(Date.now() + 3_600_000);
    const roots = await jobs.addFlow([{ ref: 'one', identifier: 'flow_zip', runAt: later }, { ref: 'two', identifier: 'flow_zip', runAt: later }]);
    try {
      await assert.rejects(jobs.waitForFlow(flow.flowId, { timeout: '10s' }), (error) => isJobQueueError(error, 'JQ_FLOW_FAILED'));
      const [login, report] = [flow.jobs.login.id, flow.jobs.report.id];

      const html = await get(`/flows/${flow.flowId}`);
      const text = decoded(html);
      assert.ok(!text.includes(SECRET), 'the secret is not on the page');
      assert.ok(text.includes('eve refused with key [redacted]'), "the root's error is shown, redacted");
      assert.match(html, new RegExp(`<h1>Flow <span class="mono">#${flow.flowId}</span> <span class="badge s-failed">failed</span></h1>`));
      const groups = [...html.matchAll(/<tbody data-state="([a-z]+)">([\s\S]*?)<\/tbody>/g)].map(([, state, rows]) => [state, [...rows.matchAll(/<tr data-job="(\d+)">/g)].map((row) => row[1])]);
      assert.deepEqual(groups, [['failed', [login, report]]], 'both jobs, under failed');
      assert.match(text, new RegExp(`<tr data-job="${report}">\\s*<td><a href="jobs/${report}" class="mono">#${report}</a></td>\\s*<td class="mono">report</td>\\s*<td class="mono">flow_zip</td>`));
      assert.ok(text.includes('JQ_DEPENDENCY_FAILED'), "the dependent's error says why it failed");
      const edges = [...html.matchAll(/<tr data-edge="(\d+):(\d+)">([\s\S]*?)<\/tr>/g)].map(([, from, to, cells]) => [from, to, cells.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim()]);
      assert.deepEqual(edges, [[report, login, `report #${report} login #${login} fail failed`]]);
      assert.deepEqual(
        [...html.matchAll(/<a href="jobs\/(\d+)" class="node s-([a-z]+)" data-ref="([^"]*)" data-depth="(\d+)"/g)].map((m) => m.slice(1)),
        [[login, 'failed', 'login', '0'], [report, 'failed', 'report', '1']],
        'the graph: login, then report',
      );
      // every link of the page leads to a page
      const href = decoded(/<base href="([^"]*)">/.exec(html)?.[1] ?? '');
      const links = new Set([...html.matchAll(/<a [^>]*href="([^"]*)"/g)].map(([, link]) => new URL(decoded(link), new URL(href, `${base}/flows/${flow.flowId}`)).href));
      assert.ok(links.has(`${base}/jobs/${report}`), [...links].join(' '));
      for (const link of links) assert.equal((await fetch(link, { headers: { cookie: OPERATOR } })).status, 200, `GET ${link}`);

      // no such flow, not an id, a job of another flow: 404; no operator: 403, nothing shown
      for (const id of ['999999999', 'abc', '0', roots.jobs.two.id]) {
        const response = await fetch(`${base}/flows/${id}`, { headers: { cookie: OPERATOR } });
        assert.equal(response.status, 404, `GET /flows/${id}`);
        assert.doesNotMatch(await response.text(), /flow_zip/);
      }
      assert.match(await get(`/flows/${roots.flowId}`), /<tbody data-state="scheduled">/);
      const refused = await fetch(`${base}/flows/${flow.flowId}`);
      assert.equal(refused.status, 403);
      assert.doesNotMatch(await refused.text(), /login|report|refused/);
    } finally {
      await jobs.cancelFlow(roots.flowId);
    }
  });

  it("a flow's refs and its jobs' errors with markup are text on its page: no tag or on* attribute the same flow with plain text has not", async () => {
    const { jobs } = ctx.t;
    // alike but for their refs and the root's error: the root retries in an hour, its dependent stays blocked
    const add = (variant: 'xss' | 'twin') => {
      const refs = variant === 'xss' ? { root: XSS.attribute, next: XSS.html } : { root: PLAIN.attribute, next: PLAIN.html };
      return jobs.addFlow([
        { ref: refs.root, identifier: 'flow_render_invoice', payload: { variant } },
        { ref: refs.next, identifier: 'flow_zip', payload: {}, dependsOn: [refs.root] },
      ]);
    };
    const [xss, twin] = [await add('xss'), await add('twin')];
    try {
      await failedOnce(xss.flowId);
      await failedOnce(twin.flowId);
      const html = await get(`/flows/${xss.flowId}`);
      assertInert(html, `GET /flows/${xss.flowId}`);
      const text = decoded(html);
      for (const shown of [XSS.attribute, XSS.html, XSS.error]) assert.ok(text.includes(shown), `the page shows ${shown} as text`);
      const twinHtml = await get(`/flows/${twin.flowId}`);
      const [tags, twinTags] = [startTags(html), startTags(twinHtml)];
      assert.deepEqual({ extra: extraTags(tags, twinTags), missing: extraTags(twinTags, tags) }, { extra: [], missing: [] }, 'the same tags as the plain flow');
      assert.ok(twinTags.includes('a href class data-ref data-depth data-state'), "the graph's steps are among the compared tags");
    } finally {
      await jobs.cancelFlow(xss.flowId);
      await jobs.cancelFlow(twin.flowId);
    }
  });

  it("a job's page links to its flow's page when the flow is more than that job: a step of addFlow (blocked too), a chain's first job and its continuation; a job added alone links nowhere", async () => {
    const { jobs } = ctx.t;
    const flow = await jobs.addFlow([
      { ref: 'fetch', identifier: 'flow_fetch', payload: {}, runAt: new Date(Date.now() + 3_600_000) },
      { ref: 'zip', identifier: 'flow_zip', payload: {}, dependsOn: ['fetch'] },
    ]);
    try {
      const alone = await jobs.add('flow_zip', {});
      const first = await jobs.add('flow_continue', {});
      await jobs.waitForJob(alone.id, { timeout: '10s' });
      await jobs.waitForFlow(first.id, { timeout: '10s' });
      const chain = (await jobs.getFlow(first.id))!.jobs.map((job) => job.id);
      assert.equal(chain.length, 2, 'the job and its continuation');
      const flowLink = (html: string) => /<dt>Flow<\/dt><dd class="flow">([\s\S]*?)<\/dd>/.exec(html)?.[1] ?? null;

      assert.equal((await jobs.getJob(flow.jobs.zip.id))?.state, 'blocked');
      for (const ref of ['fetch', 'zip']) {
        const link = flowLink(await get(`/jobs/${flow.jobs[ref].id}`));
        assert.equal(link, `<a href="flows/${flow.flowId}" class="mono">#${flow.flowId}</a> <span class="muted">as</span> <span class="mono">${ref}</span>`, `job ${ref}`);
      }
      for (const id of chain) assert.equal(flowLink(await get(`/jobs/${id}`)), `<a href="flows/${first.id}" class="mono">#${first.id}</a>`, `job ${id} of the chain`);
      const aloneHtml = await get(`/jobs/${alone.id}`);
      assert.equal(flowLink(aloneHtml), null, 'a job added alone names no flow');
      assert.doesNotMatch(aloneHtml, /href="flows\//);

      // the chain's page: both jobs, completed, drawn as one step (no ref), no edge
      const chainPage = await get(`/flows/${first.id}`);
      assert.match(chainPage, /<h1>Flow <span class="mono">#\d+<\/span> <span class="badge s-completed">completed<\/span><\/h1>/);
      assert.deepEqual([...chainPage.matchAll(/<tr data-job="(\d+)">/g)].map((m) => m[1]), chain);
      assert.match(chainPage, new RegExp(`<a href="jobs/${chain[1]}" class="node s-completed" data-ref="flow #${first.id}" data-depth="0"`));
      assert.match(chainPage, new RegExp(`#${chain[1]} \\(2 jobs\\) · flow_zip`));
      assert.match(chainPage, /No job of this flow waits for another/);
    } finally {
      await jobs.cancelFlow(flow.flowId); // its blocked job would show in the other test's list of blocked jobs
    }
  });

  it("a blocked job's page has the Cancel action, whose form cancels it", async () => {
    const { jobs } = ctx.t;
    const flow = await jobs.addFlow([
      { ref: 'fetch', identifier: 'flow_fetch', payload: {}, runAt: new Date(Date.now() + 3_600_000) },
      { ref: 'zip', identifier: 'flow_zip', payload: {}, dependsOn: ['fetch'] },
    ]);
    const zip = flow.jobs.zip.id;
    try {
      assert.equal((await jobs.getJob(zip))?.state, 'blocked');
      const url = `${base}/jobs/${zip}`;
      const response = await fetch(url, { headers: { cookie: OPERATOR } });
      const { target, fields } = formOf(await response.text(), url, `jobs/${zip}/cancel`);
      const cancelled = await fetch(target, {
        method: 'POST',
        headers: { ...FORM, cookie: [OPERATOR, ...tokenCookies(response)].join('; '), origin: ctx.t.url!, 'sec-fetch-site': 'same-origin' },
        body: fields.toString(),
        redirect: 'manual',
      });
      assert.equal(cancelled.status, 303);
      assert.equal(cancelled.headers.get('location'), `/queue/jobs/${zip}?done=cancelled`);
      assert.equal((await jobs.getJob(zip))?.state, 'cancelled');
      assert.doesNotMatch(await get(`/jobs/${zip}`), /action="jobs\/\d+\/cancel"/, 'no Cancel once it is cancelled');
    } finally {
      await jobs.cancelFlow(flow.flowId);
    }
  });

  it("in a browser: a job's link opens its flow's page, which shows the flow's state, its jobs by state, its edges and a graph by depth, each step a link to its job", async (t) => {
    if (!(await openOperatorPage(t))) return;
    // a diamond: fetch completes; render-en runs (until cancelled), render-fr waits for its run_at, zip is blocked by both
    const { flowId, jobs: steps } = await ctx.t.jobs.addFlow([
      { ref: 'fetch', identifier: 'flow_fetch', payload: {} },
      { ref: 'render-en', identifier: 'flow_render', payload: { lang: 'en' }, dependsOn: ['fetch'] },
      { ref: 'render-fr', identifier: 'flow_render', payload: { lang: 'fr' }, dependsOn: ['fetch'], runAt: new Date(Date.now() + 3_600_000) },
      { ref: 'zip', identifier: 'flow_zip', payload: {}, dependsOn: ['render-en', 'render-fr'], onDependencyFailure: 'continue' },
    ]);
    const id = (ref: string) => steps[ref].id;
    try {
      await waitForValue(ctx.sql, 'render-en to run', 'select count(*)::int from job_queue.jobs where id = $1 and started_at is not null', 1, [id('render-en')]);

      // the running branch's page names its flow and its ref; its link opens the flow's page
      await page.goto(`${base}/jobs/${id('render-en')}`);
      assert.equal(await page.locator('dl.facts dd.flow').innerText(), `#${flowId} as render-en`);
      await page.screenshot({ path: screenshotPath(platform, 'flow-1-job') });
      await page.click(`dd.flow a[href="flows/${flowId}"]`);
      await page.waitForURL(new RegExp(`/flows/${flowId}$`));
      assert.match(await page.locator('h1').innerText(), new RegExp(`^Flow\\s+#${flowId}\\s+running$`, 'i'));
      assert.match(await page.locator('.flow-summary').innerText(), /^4 jobs:\s+Blocked 1\s+Scheduled 1\s+Running 1\s+Completed 1\s+· 4 edges$/);

      // its jobs, grouped by state in JOB_STATES' order: ref, task, state, attempts, each linking to its job
      const groups = await page.locator('section.flow-jobs tbody').evaluateAll((bodies) =>
        bodies.map((body) => [body.getAttribute('data-state'), [...body.querySelectorAll('tr[data-job]')].map((row) => [...row.querySelectorAll('td')].slice(0, 5).map((td) => td.textContent!.trim()))]),
      );
      const row = (ref: string, task: string, state: string, attempts: number) => [`#${id(ref)}`, ref, task, state, `${attempts}/${steps[ref].maxAttempts}`];
      assert.deepEqual(groups, [
        ['blocked', [row('zip', 'flow_zip', 'blocked', 0)]],
        ['scheduled', [row('render-fr', 'flow_render', 'scheduled', 0)]],
        ['running', [row('render-en', 'flow_render', 'running', 1)]],
        ['completed', [row('fetch', 'flow_fetch', 'completed', 1)]],
      ]);
      const links = await page.locator('section.flow-jobs tr[data-job] td:first-child a').evaluateAll((as) => as.map((a) => a.getAttribute('href')));
      assert.deepEqual(links, ['zip', 'render-fr', 'render-en', 'fetch'].map((ref) => `jobs/${id(ref)}`));

      // its edges: who waits for whom, the policy, how the dependency ended
      const edges = await page.locator('table.edges tbody tr').evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll('td')].map((td) => td.textContent!.replace(/\s+/g, ' ').trim())));
      const edge = (from: string, to: string, policy: string, ended: string) => [`${from} #${id(from)}`, `${to} #${id(to)}`, policy, ended];
      assert.deepEqual(edges, [
        edge('render-en', 'fetch', 'fail', 'completed'),
        edge('render-fr', 'fetch', 'fail', 'completed'),
        edge('zip', 'render-en', 'continue', 'not yet'),
        edge('zip', 'render-fr', 'continue', 'not yet'),
      ]);

      // the graph: a column per depth, left to right, the two branches apart; an arrow per edge, dashed while it has not ended
      const nodes = await page.locator('.graph svg a.node').evaluateAll((as) =>
        as.map((a) => ({ ref: a.getAttribute('data-ref'), depth: a.getAttribute('data-depth'), state: a.getAttribute('data-state'), box: a.getBoundingClientRect().toJSON() as { x: number; y: number; width: number; height: number } })),
      );
      assert.deepEqual(nodes.map((n) => [n.ref, n.depth, n.state]), [['fetch', '0', 'completed'], ['render-en', '1', 'running'], ['render-fr', '1', 'scheduled'], ['zip', '2', 'blocked']]);
      const [fetchBox, enBox, frBox, zipBox] = nodes.map((n) => n.box);
      assert.ok(fetchBox.x + fetchBox.width < enBox.x && enBox.x === frBox.x && frBox.x + frBox.width < zipBox.x, `columns by depth: ${JSON.stringify(nodes)}`);
      assert.ok(enBox.y + enBox.height <= frBox.y || frBox.y + frBox.height <= enBox.y, 'the branches do not overlap');
      const arrows = await page.locator('.graph svg g.link').evaluateAll((gs) => gs.map((g) => `${g.getAttribute('data-to')} ← ${g.getAttribute('data-from')}: ${g.getAttribute('class')}`));
      assert.deepEqual(arrows, ['render-en ← fetch: link s-completed', 'render-fr ← fetch: link s-completed', 'zip ← render-en: link pending', 'zip ← render-fr: link pending']);
      await page.screenshot({ path: screenshotPath(platform, 'flow-2-page'), fullPage: true });

      // a step of the graph opens its job, whose page links back
      await page.click('.graph svg a.node[data-ref="fetch"]');
      await page.waitForURL(new RegExp(`/jobs/${id('fetch')}$`));
      assert.match(await page.locator('h1').innerText(), /flow_fetch\s+completed/i);
      assert.equal(await page.locator('dl.facts dd.flow').innerText(), `#${flowId} as fetch`);

      // the list of jobs filters on blocked, whose badge has its colour
      await page.goto(`${base}/jobs?state=blocked`);
      assert.deepEqual(await page.locator('table.jobs tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-job'))), [id('zip')]);
      const colour = await page.locator('table.jobs .badge.s-blocked').evaluate((badge) => badge.ownerDocument.defaultView!.getComputedStyle(badge).backgroundColor);
      assert.equal(colour, 'rgb(14, 116, 144)');
    } finally {
      await ctx.t.jobs.cancelFlow(flowId);
    }
    await assert.rejects(ctx.t.jobs.waitForFlow(flowId, { timeout: '10s' }), (error) => isJobQueueError(error, 'JQ_FLOW_CANCELLED'));
    await page.goto(`${base}/flows/${flowId}`);
    assert.match(await page.locator('h1').innerText(), /cancelled$/i);
    assert.deepEqual(await page.locator('section.flow-jobs tbody').evaluateAll((bodies) => bodies.map((body) => body.getAttribute('data-state'))), ['completed', 'cancelled']);
    await page.screenshot({ path: screenshotPath(platform, 'flow-3-cancelled'), fullPage: true });
    await context.close();
  });
});
