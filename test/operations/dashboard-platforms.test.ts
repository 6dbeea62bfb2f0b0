import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { INestApplication } from '@nestjs/common';
import { JobQueueDashboardModule } from '../../libs/job-queue/src/dashboard';
import { closeTestApp, createTestApp, openTestApp, PLATFORMS, type TestApp, type TestAppContext } from '../support/app';
import { FORM, formOf, tokenCookies } from '../support/dashboard-forms';
import { createTestDatabase } from '../support/database';

/** The compiled files of the dashboard, each with its text. */
function compiled(dir: string): Array<[string, string]> {
  return readdirSync(dir).flatMap((name): Array<[string, string]> => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return compiled(path);
    return name.endsWith('.js') ? [[path, readFileSync(path, 'utf8')]] : [];
  });
}

/**
 * What lets one dashboard serve Express and Fastify apps: it loads neither platform (the
 * request and the reply are read by duck typing), and on Fastify its forms are parsed by
 * whichever urlencoded parser the app has, @fastify/formbody (the other tests' Fastify apps)
 * or Nest's own.
 */
describe('dashboard platforms', () => {
  it("loads no HTTP platform's package: an app on either platform needs only its own", () => {
    const files = compiled(join(__dirname, '..', '..', 'libs', 'job-queue', 'src', 'dashboard'));
    assert.ok(files.length > 5, `the compiled dashboard: ${files.length} files`);
    for (const [path, text] of files) {
      const loaded = [...text.matchAll(/require\("([^"]+)"\)|import\("([^"]+)"\)/g)].map((m) => m[1] ?? m[2]);
      assert.deepEqual(loaded.filter((name) => /^(express|fastify|@fastify\/|@nestjs\/platform-)/.test(name)), [], path);
    }
  });

  for (const platform of PLATFORMS) {
    it(`the test apps run on the platform they are asked for: ${platform}`, async () => {
      const db = await createTestDatabase(`dashboard_platform_${platform}`);
      let app: TestApp | undefined;
      try {
        app = await createTestApp({ url: db.url, imports: [JobQueueDashboardModule.forRoot({ public: true })], http: { platform }, jobQueue: { worker: false, externalTasks: '*' } });
        assert.equal((app.app as INestApplication).getHttpAdapter().getType(), platform);
        assert.equal((await fetch(`${app.url}/queue`)).status, 200);
      } finally {
        await app?.close();
        await db.drop();
      }
    });
  }

  describe("on Fastify with Nest's own form parser (bodyParser on, no @fastify/formbody)", () => {
    let ctx: TestAppContext;
    before(async () => {
      ctx = await openTestApp('dashboard_fastify_nest_forms', {
        imports: [JobQueueDashboardModule.forRoot({ public: true })],
        http: { platform: 'fastify', forms: 'nest' },
        jobQueue: { worker: false, externalTasks: '*' },
      });
    });
    after(() => closeTestApp(ctx));

    it("a page's own form cancels a job", async () => {
      const { id } = await ctx.t.jobs.add('nobody_runs_this', {}, { runAt: new Date(Date.now() + 3_600_000) });
      const pageUrl = `${ctx.t.url}/queue/jobs/${id}`;
      const response = await fetch(pageUrl);
      const { target, fields } = formOf(await response.text(), pageUrl, `jobs/${id}/cancel`);
      const posted = await fetch(target, {
        method: 'POST',
        headers: { ...FORM, cookie: tokenCookies(response).join('; '), origin: ctx.t.url!, 'sec-fetch-site': 'same-origin' },
        body: fields.toString(),
        redirect: 'manual',
      });
      assert.equal(posted.status, 303);
      assert.equal(posted.headers.get('location'), `/queue/jobs/${id}?done=cancelled`);
      assert.equal((await ctx.t.jobs.getJob(id))?.state, 'cancelled');
    });
  });
});
