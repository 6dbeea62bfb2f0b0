import assert from 'node:assert/strict';
import { connect as netConnect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Injectable, Module, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { isJobQueueError, Task, type Job } from '../../libs/job-queue/src';
import { JobQueueDashboardModule } from '../../libs/job-queue/src/dashboard';
import { closeTestApp, createTestApp, openTestApp, PLATFORMS, type TestApp, type TestAppContext } from '../support/app';
import { CookieJar, formOf } from '../support/dashboard-forms';
import { waitForValue } from '../support/wait';

const SECRET = 'sk_live_do_not_show';
const TOKEN = '0123456789abcdef0123456789abcdef';
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

@Injectable()
class HardeningTasks {
  /** A named queue's head that fails with a secret in its error, retried in an hour. */
  @Task('sync_crm', { queueName: 'crm', maxAttempts: 5, retryDelay: () => 3_600_000 })
  syncCrm() {
    throw new Error(`CRM refused api key ${SECRET}`);
  }
}

/** What an app whose errors carry secrets writes: no error text of any job is shown. */
function redact(job: Job): Job {
  return { ...job, lastError: job.lastError && '[redacted]', errors: job.errors.map((e) => ({ ...e, message: '[redacted]' })) };
}

/** A guard with a dependency from the app's own module, as most authentication guards have. */
@Injectable()
class SessionService {
  isOperator(cookie: string | undefined): boolean {
    return /(^|;\s*)operator=yes(;|$)/.test(cookie ?? '');
  }
}

@Injectable()
class SessionGuard implements CanActivate {
  constructor(private readonly sessions: SessionService) {}
  canActivate(context: ExecutionContext): boolean {
    return this.sessions.isOperator(context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers.cookie);
  }
}

@Module({ providers: [SessionService, SessionGuard], exports: [SessionService, SessionGuard] })
class AuthModule {}

/** A guard no module provides, with no dependency: the dashboard makes it. */
class HeaderGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    return context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers['x-operator'] === 'yes';
  }
}

/** A guard no module provides, whose dependency nothing can give the dashboard. */
@Injectable()
class OrphanGuard implements CanActivate {
  constructor(private readonly sessions: SessionService) {}
  canActivate(): boolean {
    return this.sessions.isOperator(undefined);
  }
}

/** Sends `text` as is (a request-target no fetch() would send) and returns the response head. */
function rawRequest(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = netConnect(port, '127.0.0.1', () => socket.write(text));
    let data = '';
    socket.on('data', (chunk) => (data += chunk.toString()));
    socket.on('end', () => resolve(data.split('\r\n\r\n')[0]));
    socket.on('error', reject);
  });
}

/**
 * The dashboard against what an attacker or an unusual app brings: markup in every job field,
 * redact on every page, each cross-site check on its own, a malformed token cookie, an
 * absolute request-target, a refusing guard on every method, and a guard class with
 * dependencies of the app.
 */
for (const platform of PLATFORMS) describe(`dashboard hardening (${platform})`, () => {
  let ctx: TestAppContext;
  let base: string;

  before(async () => {
    ctx = await openTestApp('dashboard_hardening', {
      providers: [HardeningTasks],
      imports: [JobQueueDashboardModule.forRoot({ path: 'queue', public: true, redact })],
      http: { platform },
      jobQueue: { pollInterval: 200, externalTasks: '*' },
    });
    base = `${ctx.t.url}/queue`;
  });
  after(() => closeTestApp(ctx));

  it("the overview shows a held-up queue's head error through redact", async () => {
    const [head] = await ctx.t.jobs.addMany([{ identifier: 'sync_crm', payload: {} }, { identifier: 'sync_crm', payload: {} }]);
    await waitForValue(ctx.sql, 'the head of crm to fail once, its attempt released', 'select attempts from job_queue.jobs where id = $1 and locked_at is null', 1, [head.id]);
    const page = await (await fetch(base)).text();
    assert.match(page, new RegExp(`href="jobs/${head.id}"`), 'the held-up queue is listed');
    assert.match(page, /\[redacted\]/);
    assert.doesNotMatch(page, new RegExp(SECRET));
  });

  it('job data full of markup reaches no page unescaped', async () => {
    const task = `x"'><img src=x onerror=alert(1)>`;
    const queue = `javascript:alert(2)//"'><svg onload=alert(2)>`;
    const key = `</pre><script>alert(3)</script>`;
    const { rows } = await ctx.sql.query(`select id::text from job_queue.add_job($1, $2::jsonb, queue_name => $3, job_key => $4)`, [
      task,
      JSON.stringify({ a: '</pre><script>alert(4)</script>' }),
      queue,
      key,
    ]);
    const id = rows[0].id as string;
    await ctx.sql.query(`select job_queue.add_job($1, '{}'::jsonb, queue_name => $2)`, [task, queue]);
    // the head has failed once and waits an hour for its retry (as a release leaves it)
    await ctx.sql.query(
      `update job_queue.jobs set attempts = 1, errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'message', $2::text, 'code', $2::text)),
         last_error = $2, first_run_at = run_at, run_at = now() + interval '1 hour' where id = $1`,
      [id, `"><img src=y onerror=alert(5)>`],
    );
    await ctx.sql.query(`insert into job_queue.known_crontabs (identifier, known_since, task_identifier, expression, time_zone) values ($1, now(), $1, $1, $1)`, [`"><img onerror=alert(6)>`]);
    await ctx.sql.query(`insert into job_queue.workers (id, timeout_ms, hostname) values ($1, 60000, $1)`, [`"><img onerror=alert(7)>`]);
    const paths = [
      '', '/jobs', `/jobs/${id}`, `/jobs?q=${encodeURIComponent(key)}`, `/jobs?task=${encodeURIComponent(task)}`, `/jobs?queue=${encodeURIComponent(queue)}`,
      '/cron', '/workers', `/jobs?state=${encodeURIComponent('"><img onerror=alert(10)>')}`,
    ];
    for (const path of paths) {
      const page = await (await fetch(`${base}${path}`)).text();
      assert.match(page, /alert\(/, `GET ${path || '/'} shows the markup, as text`);
      const tags = (page.match(/<(img|svg|script)\b[^>]*>/gi) ?? []).filter((tag) => !tag.startsWith('<svg viewBox') && tag !== '<script src="assets/dashboard.js" defer>');
      assert.deepEqual(tags, [], `GET ${path || '/'}`);
      assert.doesNotMatch(page, /href="javascript:/i, `GET ${path || '/'}`);
    }
  });

  it("?error= and ?done= show only the dashboard's own words: a crafted link's text nowhere, a failed action's fixed message", async () => {
    const crafted = 'Session expired: sign in again at https://evil.example';
    const links = [
      `/jobs?error=${encodeURIComponent(crafted)}`,
      `?error=${encodeURIComponent(`JQ_JOB_RUNNING ${crafted}`)}`,
      `/jobs?done=deleted&n=${encodeURIComponent(crafted)}`,
      `?done=${encodeURIComponent(crafted)}`,
      `?error=toString`,
    ];
    for (const link of links) {
      const page = await fetch(`${base}${link}`);
      assert.equal(page.status, 200, link);
      const text = await page.text();
      assert.doesNotMatch(text, /evil\.example|Session expired/, `GET ${link} shows none of the link's text`);
      assert.doesNotMatch(text, /class="flash/, `GET ${link} shows no message`);
    }

    // a job a live worker holds cannot be deleted; a waiting one cannot be retried
    await ctx.sql.query(`insert into job_queue.workers (id, timeout_ms) values ('held-by-the-test', 3600000)`);
    const { id: held } = await ctx.t.jobs.add('nobody_runs_this', {});
    await ctx.sql.query(`update job_queue.jobs set locked_at = now(), locked_by = 'held-by-the-test', attempts = 1 where id = $1`, [held]);
    const { id: waiting } = await ctx.t.jobs.add('nobody_runs_this', {});
    const headers = { ...FORM, cookie: `jq_dashboard_csrf=${TOKEN}`, origin: ctx.t.url!, 'sec-fetch-site': 'same-origin' };
    const post = (path: string) => fetch(`${base}${path}`, { method: 'POST', headers, body: `_csrf=${TOKEN}`, redirect: 'manual' });
    const refusals: Array<[string, string, RegExp]> = [
      [`/jobs/${held}/delete`, `/queue/jobs/${held}?error=JQ_JOB_RUNNING`, /A worker holds the job: cancel it first\./],
      [`/jobs/${waiting}/retry`, `/queue/jobs/${waiting}?error=not-retryable`, /Only a failed or cancelled job can be retried/],
    ];
    for (const [path, location, message] of refusals) {
      const response = await post(path);
      assert.equal(response.status, 303, `POST ${path}`);
      assert.equal(response.headers.get('location'), location, `POST ${path}: a code, no text`);
      const page = await (await fetch(`${ctx.t.url}${location}`)).text();
      assert.match(/<div class="flash error"[^>]*>([^<]*)</.exec(page)?.[1] ?? '', message, `GET ${location}`);
    }
    assert.ok(await ctx.t.jobs.getJob(held), 'the held job is still there');
    await ctx.sql.query(`delete from job_queue.jobs where id = $1`, [held]);
    await ctx.sql.query(`delete from job_queue.workers where id = 'held-by-the-test'`);
  });

  it('each cross-site check refuses on its own: a wrong form token, another Origin, Sec-Fetch-Site', async () => {
    const { id } = await ctx.t.jobs.add('nobody_runs_this', {});
    const post = (headers: Record<string, string>, body: string) =>
      fetch(`${base}/jobs/${id}/cancel`, { method: 'POST', headers: { ...FORM, cookie: `jq_dashboard_csrf=${TOKEN}`, ...headers }, body, redirect: 'manual' });
    assert.equal((await post({}, `_csrf=${'f'.repeat(32)}`)).status, 403, 'a token of the right form that is not the cookie');
    assert.equal((await post({}, `_csrf=${encodeURIComponent('é'.repeat(32))}`)).status, 403, 'as many characters as a token, not all ASCII');
    assert.equal((await post({}, `_csrf=${TOKEN}&_csrf=${TOKEN}`)).status, 403, 'the field twice');
    assert.equal((await post({ origin: 'https://evil.example' }, `_csrf=${TOKEN}`)).status, 403, 'another origin, no Sec-Fetch-Site');
    assert.equal((await post({ 'sec-fetch-site': 'same-site', origin: ctx.t.url! }, `_csrf=${TOKEN}`)).status, 403, 'a sibling site');
    assert.equal((await ctx.t.jobs.getJob(id))?.cancelRequestedAt, null, 'nothing was cancelled');
    assert.equal((await post({ origin: ctx.t.url!, 'sec-fetch-site': 'same-origin' }, `_csrf=${TOKEN}`)).status, 303, 'the page itself');
  });

  it('a malformed token cookie: a page renders, expires it and issues a new token; an action with it alone is a 400, not a 403; a valid one beside it still acts', async () => {
    const { id } = await ctx.t.jobs.add('nobody_runs_this', {});
    const sameOrigin = { origin: ctx.t.url!, 'sec-fetch-site': 'same-origin' };
    const cancel = (cookie: string, token: string, headers: Record<string, string> = sameOrigin) =>
      fetch(`${base}/jobs/${id}/cancel`, { method: 'POST', headers: { ...FORM, cookie, ...headers }, body: `_csrf=${encodeURIComponent(token)}`, redirect: 'manual' });
    const malformed: Record<string, string> = {
      'not valid percent-encoding (a sibling site can set one)': '%E0%A4%A',
      'too short': 'abc123',
      'too long': `${TOKEN}00`,
      'not hex': 'g'.repeat(32),
      'upper-case hex': TOKEN.toUpperCase(),
      'over-long': 'a'.repeat(3000),
      empty: '',
    };
    for (const [what, value] of Object.entries(malformed)) {
      for (const name of ['jq_dashboard_csrf', 'jq_dashboard_csrf_0badc0de']) {
        const cookie = `${name}=${value}`;
        const page = await fetch(`${base}/jobs/${id}`, { headers: { cookie } });
        assert.equal(page.status, 200, `${what} (${name}): the page is served`);
        const set = page.headers.getSetCookie();
        assert.equal(set.length, 2, `${what} (${name}): ${set.join('\n')}`);
        assert.match(set[0], new RegExp(`^${name}=; Path=/queue; HttpOnly; SameSite=Strict; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT$`), `${what}: expired first`);
        assert.match(set[1], /^jq_dashboard_csrf_[0-9a-f]{8}=[0-9a-f]{32}; Path=\/queue;/, `${what}: then a new token`);
        assert.equal(formOf(await page.text(), page.url, `jobs/${id}/cancel`).fields.get('_csrf'), set[1].split(/[=;]/)[1], `${what}: the form carries the new token`);

        const refused = await cancel(cookie, TOKEN);
        assert.equal(refused.status, 400, `${what} (${name}): a bad request, not a forgery`);
        assert.match(await refused.text(), new RegExp(`malformed form token cookie \\(${name}\\): reload the page`));
        assert.equal((await cancel(cookie, TOKEN, { origin: 'https://evil.example' })).status, 403, `${what}: from another origin, refused as such first`);
      }
    }
    assert.equal((await ctx.t.jobs.getJob(id))?.state, 'waiting', 'nothing was cancelled');

    // a valid cookie beside a malformed one (of another name, or of the same name from another
    // path): the page keeps the valid token and expires only the malformed name
    const other = `abcdef01${TOKEN.slice(8)}`;
    const beside = `jq_dashboard_csrf=%E0%A4%A; jq_dashboard_csrf_abcdef01=${other}; jq_dashboard_csrf_0badc0de=${TOKEN}; jq_dashboard_csrf_0badc0de=junk`;
    const page = await fetch(`${base}/jobs/${id}`, { headers: { cookie: beside } });
    assert.equal(page.status, 200);
    assert.deepEqual(page.headers.getSetCookie().map((c) => c.split(';')[0]), ['jq_dashboard_csrf='], 'only the malformed name, and no new token');
    assert.equal(formOf(await page.text(), page.url, `jobs/${id}/cancel`).fields.get('_csrf'), other, 'the form keeps the first valid token');

    // the reloaded page's form, posted with the cookies the browser then holds, acts
    const jar = new CookieJar('jq_dashboard_csrf_0badc0de=junk');
    const reloaded = await fetch(`${base}/jobs/${id}`, { headers: { cookie: jar.header } });
    jar.store(reloaded);
    const form = formOf(await reloaded.text(), reloaded.url, `jobs/${id}/cancel`);
    const acted = await fetch(form.target, { method: 'POST', headers: { ...FORM, ...sameOrigin, cookie: `${jar.header}; jq_dashboard_csrf_0badc0de=junk` }, body: form.fields, redirect: 'manual' });
    assert.equal(acted.status, 303, 'with a malformed cookie still sent beside the new one (a sibling site\'s, which the expiry cannot clear)');
    assert.equal((await ctx.t.jobs.getJob(id))?.state, 'cancelled', 'the cancel went through');
  });

  it('an action redirects to this server whatever request-target the client sent', async () => {
    const { id } = await ctx.t.jobs.add('nobody_runs_this', {});
    const body = `_csrf=${TOKEN}`;
    const head = await rawRequest(
      Number(new URL(ctx.t.url!).port),
      `POST http://evil.example/queue/jobs/${id}/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n` +
        `Cookie: jq_dashboard_csrf=${TOKEN}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
    const location = /^location: (.*)$/im.exec(head)?.[1]?.trim();
    assert.ok(location?.startsWith(`/queue/jobs/${id}?`), `Location: ${location}`);
  });

  it('a guard class with dependencies of the app: the app starts, the guard admits and refuses', async () => {
    let guarded: TestApp | undefined;
    try {
      guarded = await createTestApp({
        url: ctx.db.url,
        imports: [AuthModule, JobQueueDashboardModule.forRoot({ path: 'queue', guard: SessionGuard })],
        http: { platform },
        jobQueue: { worker: false, externalTasks: '*' },
      });
      const url = `${guarded.url}/queue`;
      assert.equal((await fetch(url, { headers: { cookie: 'operator=yes' } })).status, 200);
      for (const path of ['', '/jobs', '/jobs/1', '/cron', '/workers', '/jobs/1/delete', '/tasks/x/retry-failed']) {
        for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'DELETE']) {
          const response = await fetch(`${url}${path}`, { method });
          const text = await response.text();
          assert.ok([403, 404].includes(response.status), `${method} ${path || '/'} without the cookie: ${response.status}`);
          assert.doesNotMatch(text, /<table|nobody_runs_this/, `${method} ${path || '/'} shows nothing`);
        }
      }
    } finally {
      await guarded?.close();
    }
  });

  it('a guard class no module provides is made by the dashboard; one it cannot make stops the app with JQ_INVALID_DASHBOARD_OPTIONS', async () => {
    let app: TestApp | undefined;
    try {
      app = await createTestApp({ url: ctx.db.url, imports: [JobQueueDashboardModule.forRoot({ guard: HeaderGuard })], http: { platform }, jobQueue: { worker: false, externalTasks: '*' } });
      assert.equal((await fetch(`${app.url}/queue/jobs`, { headers: { 'x-operator': 'yes' } })).status, 200);
      assert.equal((await fetch(`${app.url}/queue/jobs`)).status, 403);
    } finally {
      await app?.close();
    }
    await assert.rejects(
      createTestApp({ url: ctx.db.url, imports: [JobQueueDashboardModule.forRoot({ guard: OrphanGuard })], http: { platform }, jobQueue: { worker: false, externalTasks: '*' } }),
      (error) => isJobQueueError(error, 'JQ_INVALID_DASHBOARD_OPTIONS') && /OrphanGuard/.test(error.message),
    );
  });
});
