import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { JobQueueDashboardModule } from '../../libs/job-queue/src/dashboard';
import { closeTestApp, createTestApp, openTestApp, PLATFORMS, type TestApp, type TestAppContext } from '../support/app';
import { FORM } from '../support/dashboard-forms';

const TOKEN = '0123456789abcdef0123456789abcdef';

/** The form token's Set-Cookie of a page, split into its attributes (lower-cased names). */
async function tokenCookie(url: string, headers: Record<string, string> = {}): Promise<Map<string, string>> {
  const response = await fetch(url, { headers });
  assert.equal(response.status, 200, `GET ${url}`);
  const cookie = response.headers.getSetCookie().find((c) => c.startsWith('jq_dashboard_csrf'));
  assert.ok(cookie, `GET ${url} sets a form token`);
  return new Map(cookie.split(';').slice(1).map((a): [string, string] => [a.trim().split('=')[0].toLowerCase(), a.trim().split('=').slice(1).join('=')]));
}

/** A POST with these headers as they are, Host included (fetch() sends its own): what an app behind a proxy receives. Its status. */
function forwarded(url: string, headers: Record<string, string>): Promise<number> {
  const body = `_csrf=${TOKEN}`;
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      { host: target.hostname, port: target.port, path: target.pathname, method: 'POST', headers: { ...FORM, cookie: `jq_dashboard_csrf=${TOKEN}`, 'content-length': String(body.length), ...headers } },
      (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode!));
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

/**
 * The dashboard behind a reverse proxy, on each platform: an app that trusts its proxies
 * (here any on this machine: Express's `trust proxy`, Fastify's `trustProxy`, 'loopback') takes
 * the scheme and host the proxy forwards; an app that trusts none ignores them, whoever sends them.
 */
for (const platform of PLATFORMS) describe(`dashboard behind a proxy (${platform})`, () => {
  let ctx: TestAppContext;
  /** The app that trusts no proxy. */
  let direct: TestApp;
  let proxied: string;
  let unproxied: string;

  before(async () => {
    ctx = await openTestApp(`dashboard_proxy_${platform}`, {
      imports: [JobQueueDashboardModule.forRoot({ public: true })],
      http: { platform, trustProxy: 'loopback' },
      jobQueue: { worker: false, externalTasks: '*' },
    });
    direct = await createTestApp({ url: ctx.db.url, imports: [JobQueueDashboardModule.forRoot({ public: true })], http: { platform }, jobQueue: { worker: false, externalTasks: '*' } });
    proxied = `${ctx.t.url}/queue`;
    unproxied = `${direct.url}/queue`;
  });
  after(async () => {
    await direct?.close();
    await closeTestApp(ctx);
  });

  it('the form token cookie is Secure over HTTPS (X-Forwarded-Proto from a trusted proxy); not over HTTP, nor when an untrusted client says https', async () => {
    const https = { 'x-forwarded-proto': 'https' };
    assert.equal((await tokenCookie(`${proxied}/jobs`, https)).has('secure'), true, 'through a trusted proxy that says https');
    assert.equal((await tokenCookie(`${proxied}/jobs`)).has('secure'), false, 'over plain HTTP');
    assert.equal((await tokenCookie(`${proxied}/jobs`, { 'x-forwarded-proto': 'http' })).has('secure'), false, 'through a trusted proxy that says http');
    assert.equal((await tokenCookie(`${unproxied}/jobs`, https)).has('secure'), false, 'an app that trusts no proxy ignores the header');
    const attributes = await tokenCookie(proxied, https);
    assert.deepEqual([attributes.get('samesite'), attributes.has('httponly'), attributes.get('path')], ['Strict', true, '/queue'], 'and keeps its other attributes');
  });

  it("the Origin check behind a proxy that rewrites Host: X-Forwarded-Host from a trusted proxy counts, from anyone else not; a browser's Sec-Fetch-Site decides", async () => {
    // a waiting job: a retry of it is refused by the action (303 with an error), never by the checks (403)
    const { id } = await ctx.t.jobs.add('nobody_runs_this', {}, { runAt: new Date(Date.now() + 3_600_000) });
    const retry = (base: string, headers: Record<string, string>) => forwarded(`${base}/jobs/${id}/retry`, headers);
    const own = new URL(direct.url!).host;
    const cases: Array<[string, string, Record<string, string>, number]> = [
      ['a trusted proxy that rewrites Host and forwards it', proxied, { host: 'jobs-app:3000', 'x-forwarded-host': 'jobs.example.com', origin: 'https://jobs.example.com' }, 303],
      ['… for a page of another site', proxied, { host: 'jobs-app:3000', 'x-forwarded-host': 'jobs.example.com', origin: 'https://evil.example' }, 403],
      ['a proxy that rewrites Host and forwards nothing, to a browser that says same-origin', proxied, { host: 'jobs-app:3000', origin: 'https://jobs.example.com', 'sec-fetch-site': 'same-origin' }, 303],
      ['… to a browser that says cross-site', proxied, { host: 'jobs-app:3000', origin: 'https://jobs.example.com', 'sec-fetch-site': 'cross-site' }, 403],
      ['a browser that says same-origin, to an app that trusts no proxy', unproxied, { host: own, origin: `http://${own}`, 'sec-fetch-site': 'same-origin' }, 303],
      ['X-Forwarded-Host to an app that trusts no proxy', unproxied, { host: own, 'x-forwarded-host': 'evil.example', origin: 'https://evil.example' }, 403],
      ['Origin naming Host, to an app that trusts no proxy', unproxied, { host: own, 'x-forwarded-host': 'jobs.example.com', origin: `http://${own}` }, 303],
    ];
    for (const [what, base, headers, status] of cases) assert.equal(await retry(base, headers), status, `${what}: ${JSON.stringify(headers)}`);
    assert.equal((await ctx.t.jobs.getJob(id))?.state, 'scheduled', 'the job is untouched');
  });
});
