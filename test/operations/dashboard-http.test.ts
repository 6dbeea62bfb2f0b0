import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Task, type Job, type JobContext } from '../../libs/job-queue/src';
import { JobQueueDashboardModule } from '../../libs/job-queue/src/dashboard';
import { closeTestApp, openTestApp, PLATFORMS, type TestAppContext } from '../support/app';
import { OperatorGuard } from '../support/operator-guard';
import { CookieJar, decoded, FORM, formOf, tokenCookies } from '../support/dashboard-forms';
import { assertInert, extraTags, PLAIN, startTags, XSS } from '../support/dashboard-markup';

/**
 * The dashboard over plain HTTP (fetch), so that it is tested where Chromium is missing too
 * (dashboard.test.ts needs it): redaction on every page that lists or shows a job, the
 * actions as the page's own forms post them (session cookie, form token) checked in the
 * database, the security headers, and markup in a payload, an error message, an error code
 * and a key, on pages compared tag by tag with the same pages of a twin job with plain data.
 */

const SECRET = 'sk_live_7Hq2mZ9xVbW4';
const OPERATOR = 'operator=yes';

const ERRORS = { xss: XSS, twin: PLAIN };

@Injectable()
class HttpTasks {
  /** Reports progress and completes, or fails for good, each with the secret in what it leaves. */
  @Task('sync_account', { maxAttempts: 1 })
  syncAccount(payload: { account: string; fail?: boolean }, ctx: JobContext) {
    ctx.progress({ step: 'login', apiKey: SECRET });
    if (payload.fail) throw new Error(`account ${payload.account} refused key ${SECRET}`);
    return { account: payload.account, token: SECRET };
  }

  @Task('send_receipt', { maxAttempts: 1 })
  sendReceipt() {
    throw new Error('mail server down');
  }

  @Task('nightly_export', { maxAttempts: 1 })
  nightlyExport() {
    throw new Error('bucket full');
  }

  /** Two durable steps: one returns the secret and markup, one (named with markup) returns nothing. */
  @Task('steps_with_secret', { maxAttempts: 1 })
  async stepsWithSecret(_payload: unknown, ctx: JobContext) {
    await ctx.step('login', () => ({ token: SECRET, note: XSS.html }));
    await ctx.step(XSS.attribute, () => undefined);
    return 'done';
  }

  /** A named queue's head that fails with its variant's error and code, retried in an hour: its queue is held up. */
  @Task('render_invoice', { maxAttempts: 5, retryDelay: () => 3_600_000 })
  renderInvoice(payload: { variant: 'xss' | 'twin' }) {
    const { error, code } = ERRORS[payload.variant];
    throw Object.assign(new Error(error), { code });
  }
}

/** What an app whose jobs carry a secret shows: the secret replaced wherever it is, the rest of each text kept. */
const hide = (text: string) => text.replaceAll(SECRET, '[redacted]');
const hideJson = <T>(value: T): T => (value === null || value === undefined ? value : JSON.parse(hide(JSON.stringify(value))));
function redact(job: Job): Job {
  return {
    ...job,
    payload: hideJson(job.payload),
    result: hideJson(job.result),
    progress: hideJson(job.progress),
    lastError: job.lastError && hide(job.lastError),
    errors: job.errors.map((e) => ({ ...e, message: hide(e.message) })),
  };
}

for (const platform of PLATFORMS) describe(`dashboard over HTTP (${platform})`, () => {
  let ctx: TestAppContext;
  let base: string;
  const ids: Record<string, string> = {};
  /** The overview and the list of jobs before the jobs with markup were added. */
  const baseline: Record<string, string[]> = {};

  const get = async (path: string) => {
    const response = await fetch(`${base}${path}`, { headers: { cookie: OPERATOR } });
    assert.equal(response.status, 200, `GET ${path || '/'}`);
    return { response, page: await response.text() };
  };
  const page = async (path: string) => (await get(path)).page;

  /** Where the job's row is in the database: `finished <state>`, or `unfinished, <n> attempts` (`cancel requested`). */
  async function dbRow(id: string): Promise<string> {
    const { rows } = await ctx.sql.query(
      `select format('finished %s', state) as at from job_queue.finished_jobs where id = $1
       union all
       select format('unfinished, %s attempts%s', attempts, case when cancel_requested_at is not null then ', cancel requested' else '' end) from job_queue.jobs where id = $1`,
      [id],
    );
    return rows.map((row) => row.at as string).join(' and ') || 'gone';
  }

  /**
   * Submits the form of `pagePath` that posts to `action`, as a browser does: the page's
   * Set-Cookie token, the form's fields, its action resolved against <base>, same-origin headers.
   */
  async function submit(pagePath: string, action: string): Promise<Response> {
    const { response, page } = await get(pagePath);
    const cookies = tokenCookies(response);
    assert.equal(cookies.length, 1, `GET ${pagePath || '/'} sets the form token's cookie`);
    const { target, fields } = formOf(page, `${base}${pagePath}`, action);
    return fetch(target, {
      method: 'POST',
      headers: { ...FORM, cookie: [OPERATOR, ...cookies].join('; '), origin: ctx.t.url!, 'sec-fetch-site': 'same-origin' },
      body: fields.toString(),
      redirect: 'manual',
    });
  }

  before(async () => {
    ctx = await openTestApp('dashboard_http', {
      providers: [HttpTasks],
      imports: [JobQueueDashboardModule.forRoot({ path: 'queue', guard: OperatorGuard, redact })],
      http: { platform },
      jobQueue: { worker: false },
    });
    base = `${ctx.t.url}/queue`;
    const { jobs } = ctx.t;
    const later = new Date(Date.now() + 3_600_000);
    ids.ada = (await jobs.add('sync_account', { account: 'ada', password: SECRET }, { jobKey: 'account:ada' })).id;
    ids.bob = (await jobs.add('sync_account', { account: 'bob', password: SECRET, fail: true }, { jobKey: 'account:bob' })).id;
    ids.receipt = (await jobs.add('send_receipt', {})).id;
    ids.scheduled = (await jobs.add('send_receipt', {}, { runAt: later })).id;
    ids.export1 = (await jobs.add('nightly_export', {})).id;
    ids.export2 = (await jobs.add('nightly_export', {})).id;
    ids.twin = (await jobs.add('render_invoice', { variant: 'twin', html: PLAIN.html, attribute: PLAIN.attribute }, { queueName: 'invoices-twin', jobKey: PLAIN.key })).id;
    await ctx.t.worker.runUntilIdle();
    baseline.overview = startTags(await page(''));
    baseline.jobs = startTags(await page('/jobs'));
    ids.xss = (await jobs.add('render_invoice', { variant: 'xss', html: XSS.html, attribute: XSS.attribute }, { queueName: 'invoices-xss', jobKey: XSS.key })).id;
    await ctx.t.worker.runUntilIdle();
  });
  after(() => closeTestApp(ctx));

  it('/jobs, /jobs?q= and /jobs/:id show every job through redact: the secret on no page, the rest of each text shown', async () => {
    assert.deepEqual([await dbRow(ids.ada), await dbRow(ids.bob)], ['finished completed', 'finished failed']);
    const pages: Array<[string, string[]]> = [
      ['/jobs', [ids.ada, ids.bob]],
      ['/jobs?state=failed', [ids.bob]],
      ['/jobs?q=account%3Abob', [ids.bob]],
      [`/jobs?q=${ids.bob}`, [ids.bob]],
    ];
    for (const [path, listed] of pages) {
      const html = await page(path);
      assert.ok(!html.includes(SECRET), `GET ${path} holds no secret`);
      for (const id of listed) assert.match(html, new RegExp(`data-job="${id}"`), `GET ${path} lists job ${id}`);
      assert.ok(decoded(html).includes('account bob refused key [redacted]'), `GET ${path} shows bob's error, redacted`);
    }
    const ada = decoded(await page(`/jobs/${ids.ada}`));
    assert.ok(!ada.includes(SECRET), `GET /jobs/${ids.ada} holds no secret (payload, progress, result)`);
    for (const field of ['"password": "[redacted]"', '"apiKey": "[redacted]"', '"token": "[redacted]"', '"account": "ada"']) assert.ok(ada.includes(field), `job ${ids.ada} shows ${field}`);
    const bob = decoded(await page(`/jobs/${ids.bob}`));
    assert.ok(!bob.includes(SECRET), `GET /jobs/${ids.bob} holds no secret (payload, errors, last error)`);
    assert.ok(bob.includes('"password": "[redacted]"'), `job ${ids.bob} shows its payload, redacted`);
    assert.equal(bob.split('account bob refused key [redacted]').length - 1, 2, `job ${ids.bob} shows its attempt's error and its last error, redacted`);
  });

  it("retry, cancel and retry-failed, posted by the pages' own forms with the session and form token, change the jobs in the database", async () => {
    assert.equal(await dbRow(ids.receipt), 'finished failed');
    const retried = await submit(`/jobs/${ids.receipt}`, `jobs/${ids.receipt}/retry`);
    assert.equal(retried.status, 303, 'the retry is accepted');
    assert.equal(retried.headers.get('location'), `/queue/jobs/${ids.receipt}?done=retried`);
    assert.equal(await dbRow(ids.receipt), 'unfinished, 0 attempts', 'the retried job is back in jobs, its attempts reset');

    assert.equal(await dbRow(ids.scheduled), 'unfinished, 0 attempts');
    const cancelled = await submit(`/jobs/${ids.scheduled}`, `jobs/${ids.scheduled}/cancel`);
    assert.equal(cancelled.status, 303, 'the cancel is accepted');
    assert.equal(cancelled.headers.get('location'), `/queue/jobs/${ids.scheduled}?done=cancelled`);
    assert.equal(await dbRow(ids.scheduled), 'finished cancelled', 'the scheduled job is cancelled');

    assert.deepEqual([await dbRow(ids.export1), await dbRow(ids.export2)], ['finished failed', 'finished failed']);
    const all = await submit('', 'tasks/nightly_export/retry-failed');
    assert.equal(all.status, 303, 'the retry of every failed job is accepted');
    assert.equal(all.headers.get('location'), '/queue?done=retried-failed&n=2');
    assert.match(await page('?done=retried-failed&n=2'), /<div class="flash" role="status">2 failed job\(s\) retried\.<\/div>/, 'the overview says so');
    assert.deepEqual([await dbRow(ids.export1), await dbRow(ids.export2)], ['unfinished, 0 attempts', 'unfinished, 0 attempts'], 'every failed job of the task is back');
    assert.equal(await dbRow(ids.bob), 'finished failed', "another task's failed job is left alone");
  });

  it('two pages opened at once, each given a new token, both act: the later Set-Cookie does not replace the earlier', async () => {
    const later = new Date(Date.now() + 3_600_000);
    const jobs = await ctx.t.jobs.addMany([{ identifier: 'send_receipt', runAt: later }, { identifier: 'send_receipt', runAt: later }]);
    const jar = new CookieJar(OPERATOR);
    // both pages asked for before the browser stored either answer's cookie
    const opened = await Promise.all(jobs.map(async ({ id }) => {
      const url = `${base}/jobs/${id}`;
      const response = await fetch(url, { headers: { cookie: jar.header } });
      return { id, url, response, html: await response.text() };
    }));
    for (const { response } of opened) jar.store(response);
    for (const { id, url, html } of opened) {
      const { target, fields } = formOf(html, url, `jobs/${id}/cancel`);
      const posted = await fetch(target, {
        method: 'POST',
        headers: { ...FORM, cookie: jar.header, origin: ctx.t.url!, 'sec-fetch-site': 'same-origin' },
        body: fields.toString(),
        redirect: 'manual',
      });
      assert.equal(posted.status, 303, `the cancel of job ${id}, from its own page`);
      assert.equal(await dbRow(id), 'finished cancelled');
    }
  });

  it('every link of every page leads to a page: the navigation, the filters, the jobs, the pager', async () => {
    const pages = ['', '/jobs', '/jobs?state=failed', `/jobs/${ids.bob}`, `/jobs/${ids.xss}`, '/cron', '/workers'];
    const links = new Set<string>();
    for (const path of pages) {
      const html = await page(path);
      const href = decoded(/<base href="([^"]*)">/.exec(html)?.[1] ?? '');
      for (const [, link] of html.matchAll(/<a [^>]*href="([^"]*)"/g)) links.add(new URL(decoded(link), new URL(href, `${base}${path}`)).href);
    }
    assert.ok(links.has(base), `the overview is linked as ${base}: ${[...links].join(' ')}`);
    for (const link of links) {
      const response = await fetch(link, { headers: { cookie: OPERATOR } });
      assert.equal(response.status, 200, `GET ${link}`);
    }
  });

  it('every page sends the Content-Security-Policy, and the form token cookie is HttpOnly, SameSite=Strict, for the dashboard only', async () => {
    for (const path of ['', '/jobs', `/jobs?q=${ids.bob}`, `/jobs/${ids.bob}`, '/cron', '/workers']) {
      const { response } = await get(path);
      const policy = new Map(
        (response.headers.get('content-security-policy') ?? '').split(';').map((directive): [string, string] => {
          const [name = '', ...values] = directive.trim().split(/\s+/);
          return [name, values.join(' ')];
        }),
      );
      const directives = ['default-src', 'script-src', 'style-src', 'img-src', 'form-action', 'base-uri', 'frame-ancestors'];
      assert.deepEqual(
        Object.fromEntries(directives.map((name) => [name, policy.get(name)])),
        { 'default-src': "'none'", 'script-src': "'self'", 'style-src': "'self' 'unsafe-inline'", 'img-src': "'self' data:", 'form-action': "'self'", 'base-uri': "'self'", 'frame-ancestors': "'none'" },
        `GET ${path || '/'}: Content-Security-Policy`,
      );
      assert.equal(response.headers.get('x-frame-options'), 'DENY', `GET ${path || '/'}`);
      assert.equal(response.headers.get('x-content-type-options'), 'nosniff', `GET ${path || '/'}`);

      const cookies = response.headers.getSetCookie().filter((c) => c.startsWith('jq_dashboard_csrf'));
      assert.equal(cookies.length, 1, `GET ${path || '/'} without a token sets one`);
      const [pair, ...attributes] = cookies[0].split(';').map((part) => part.trim());
      assert.match(pair, /^jq_dashboard_csrf_([0-9a-f]{8})=\1[0-9a-f]{24}$/, 'named for its token, so that two pages opened at once keep both');
      const named = new Map(attributes.map((a): [string, string] => [a.split('=')[0].toLowerCase(), a.split('=').slice(1).join('=')]));
      assert.deepEqual(
        { samesite: named.get('samesite'), httponly: named.has('httponly'), path: named.get('path') },
        { samesite: 'Strict', httponly: true, path: '/queue' },
        `GET ${path || '/'}: ${cookies[0]}`,
      );
    }
  });

  it('markup in a payload, an error message, an error code and a key makes no tag and no on* attribute on any page', async () => {
    assert.equal(await dbRow(ids.xss), 'unfinished, 1 attempts', 'the job with markup failed once, with its error');
    const pairs: Array<[string, string, string[]]> = [
      [`/jobs/${ids.xss}`, `/jobs/${ids.twin}`, ['html', 'attribute', 'error', 'code', 'key']],
      [`/jobs?q=${encodeURIComponent(XSS.key)}`, `/jobs?q=${encodeURIComponent(PLAIN.key)}`, ['error', 'key']],
      ['/jobs?queue=invoices-xss', '/jobs?queue=invoices-twin', ['error']],
    ];
    for (const [path, twinPath, shown] of pairs) {
      const html = await page(path);
      assertInert(html, `GET ${path}`);
      const text = decoded(html);
      for (const field of shown) {
        const value = XSS[field as keyof typeof XSS];
        const json = JSON.stringify(value).slice(1, -1); // as the payload's JSON holds it
        assert.ok(text.includes(value) || text.includes(json), `GET ${path} shows the ${field} as text`);
      }
      const tags = startTags(html);
      const twin = startTags(await page(twinPath));
      assert.deepEqual({ extra: extraTags(tags, twin), missing: extraTags(twin, tags) }, { extra: [], missing: [] }, `GET ${path}: the same tags as GET ${twinPath}`);
    }
    for (const [path, name] of [['', 'overview'], ['/jobs', 'jobs']]) {
      const html = await page(path);
      assertInert(html, `GET ${path || '/'}`);
      assert.ok(decoded(html).includes(XSS.error), `GET ${path || '/'} shows the error as text`);
      const known = new Set(baseline[name]);
      assert.deepEqual([...new Set(startTags(html).filter((tag) => !known.has(tag)))], [], `GET ${path || '/'}: no kind of tag the page had before the markup was added`);
    }
  });

  it("a job's page lists its durable steps in order, each result through redact, markup in a name or a result as text", async () => {
    const job = await ctx.t.jobs.add('steps_with_secret', {});
    await ctx.t.worker.runUntilIdle();
    assert.equal(await dbRow(job.id), 'finished completed');
    const html = await page(`/jobs/${job.id}`);
    assertInert(html, `GET /jobs/${job.id}`);
    const text = decoded(html);
    assert.ok(!text.includes(SECRET), 'the secret is not on the page');
    const steps = /<h2>Steps<\/h2>([\s\S]*?)<\/section>/.exec(text)?.[1] ?? '';
    assert.ok(steps.includes('"token": "[redacted]"'), "the first step's result is shown, redacted");
    assert.ok(steps.includes(JSON.stringify(XSS.html).slice(1, -1)), "the markup in its result is shown as text");
    assert.ok(steps.indexOf('login') < steps.indexOf(XSS.attribute), 'the steps are listed in the order they were recorded, the name with markup as text');
    assert.equal(steps.split('<pre class="step-result">').length - 1, 1, 'the step that returned nothing shows no result');
  });
});
