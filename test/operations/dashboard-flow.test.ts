import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { isJobQueueError, Task, type Job } from '../../libs/job-queue/src';
import { JobQueueDashboardModule } from '../../libs/job-queue/src/dashboard';
import { closeTestApp, openTestApp, PLATFORMS, type TestAppContext } from '../support/app';
import { decoded } from '../support/dashboard-forms';
import { assertInert, extraTags, PLAIN, startTags, XSS } from '../support/dashboard-markup';
import { waitForValue } from '../support/wait';

const SECRET = 'sk_live_flow_9Tq4';
const OPERATOR = 'operator=yes';

/** The test's guard: operators carry the cookie `operator=yes`. */
@Injectable()
class OperatorGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const { headers } = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>();
    return /(^|;\s*)operator=yes(;|$)/.test(headers.cookie ?? '');
  }
}

@Injectable()
class FlowTasks {
  /** A flow's last step. */
  @Task('flow_zip')
  flowZip() {
    return null;
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
 * (their errors through redact) and its edges, its links, 404s, the guard, and refs and
 * errors with markup shown as text.
 */
for (const platform of PLATFORMS) describe(`dashboard: flows (${platform})`, () => {
  let ctx: TestAppContext;
  let base: string;

  before(async () => {
    ctx = await openTestApp(`dashboard_flow_${platform}`, {
      providers: [FlowTasks, OperatorGuard],
      imports: [JobQueueDashboardModule.forRoot({ guard: OperatorGuard, redact })],
      http: { platform },
      jobQueue: { pollInterval: 200 },
    });
    base = `${ctx.t.url}/queue`;
  });

  after(() => closeTestApp(ctx));

  const get = async (path: string) => {
    const response = await fetch(`${base}${path}`, { headers: { cookie: OPERATOR } });
    assert.equal(response.status, 200, `GET ${path}`);
    return response.text();
  };

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
});
