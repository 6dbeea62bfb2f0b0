import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { JobQueueDashboardModule } from '../../libs/job-queue/src/dashboard';
import { closeTestApp, createTestApp, openTestApp, PLATFORMS, type TestApp, type TestAppContext } from '../support/app';

/** The form token's Set-Cookie of a page, split into its attributes (lower-cased names). */
async function tokenCookie(url: string, headers: Record<string, string> = {}): Promise<Map<string, string>> {
  const response = await fetch(url, { headers });
  assert.equal(response.status, 200, `GET ${url}`);
  const cookie = response.headers.getSetCookie().find((c) => c.startsWith('jq_dashboard_csrf'));
  assert.ok(cookie, `GET ${url} sets a form token`);
  return new Map(cookie.split(';').slice(1).map((a): [string, string] => [a.trim().split('=')[0].toLowerCase(), a.trim().split('=').slice(1).join('=')]));
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
});
