import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { PLATFORMS, type TestDatabase } from '../support/app';
import { FORM, formOf, tokenCookies } from '../support/dashboard-forms';
import { connect, createTestDatabase } from '../support/database';
import { waitFor } from '../support/wait';

/** `npm start`'s app (dist/sample/main.js) in a child process, on `DATABASE_URL` and a free port. */
class SampleProcess {
  readonly child: ChildProcess;
  output = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(url: string, platform: string) {
    this.child = spawn(process.execPath, [join(__dirname, '..', '..', 'sample', 'main.js')], {
      env: { ...process.env, DATABASE_URL: url, PLATFORM: platform, PORT: '0', NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child.stdout!.on('data', (chunk) => (this.output += chunk));
    this.child.stderr!.on('data', (chunk) => (this.output += chunk));
    this.exited = new Promise((resolve) => this.child.on('close', (code, signal) => resolve({ code, signal })));
  }

  /** Where it listens, once it has said so. */
  async url(): Promise<string> {
    let port: string | undefined;
    await waitFor(
      () => `the sample to listen; its output:\n${this.output}`,
      () => {
        if (this.child.exitCode !== null) throw new Error(`the sample exited (${this.child.exitCode}):\n${this.output}`);
        port = /Listening on http:\/\/localhost:(\d+)/.exec(this.output)?.[1];
        return port !== undefined;
      },
    );
    return `http://127.0.0.1:${port}`;
  }
}

/**
 * The sample app as `npm start` and `PLATFORM=fastify npm start` run it: it starts on either
 * platform, serves its dashboard to this machine only (LocalOnlyGuard), whose forms act, and
 * stops its worker on SIGTERM.
 */
for (const platform of PLATFORMS) describe(`the sample app (${platform})`, () => {
  let db: TestDatabase;
  let sql: Client;
  let sample: SampleProcess;
  let url: string;

  before(async () => {
    db = await createTestDatabase(`sample_${platform}`);
    sql = await connect(db.url);
    sample = new SampleProcess(db.url, platform);
    url = await sample.url();
  });
  after(async () => {
    if (sample?.child.exitCode === null) sample.child.kill('SIGKILL');
    await sample?.exited;
    await sql?.end();
    await db?.drop();
  });

  it(`starts on ${platform}; its dashboard's form cancels a job`, async () => {
    assert.match(sample.output, new RegExp(`Listening on http://localhost:\\d+ \\(${platform}\\)`));
    const { rows } = await sql.query(`select id::text from job_queue.add_job('send_welcome_email', '{"userId": 0}', run_at => now() + interval '1 hour')`);
    const id = rows[0].id as string;
    const pageUrl = `${url}/dashboard/jobs/${id}`;
    const page = await fetch(pageUrl);
    assert.equal(page.status, 200);
    const { target, fields } = formOf(await page.text(), pageUrl, `jobs/${id}/cancel`);
    const posted = await fetch(target, {
      method: 'POST',
      headers: { ...FORM, cookie: tokenCookies(page).join('; '), origin: url, 'sec-fetch-site': 'same-origin' },
      body: fields.toString(),
      redirect: 'manual',
    });
    assert.equal(posted.status, 303);
    const { rows: finished } = await sql.query(`select state from job_queue.finished_jobs where id = $1`, [id]);
    assert.deepEqual(finished, [{ state: 'cancelled' }]);
  });

  it('its dashboard admits this machine only, through a proxy on this machine as well', async () => {
    const status = async (headers: Record<string, string>) => (await fetch(`${url}/dashboard/jobs`, { headers })).status;
    const local: Array<Record<string, string>> = [{}, { 'x-forwarded-for': '127.0.0.1' }, { 'x-real-ip': '::1' }, { forwarded: 'for="[::1]:4711";proto=https' }, { forwarded: 'for=127.0.0.1:5050' }];
    for (const headers of local) assert.equal(await status(headers), 200, `a local client: ${JSON.stringify(headers)}`);
    const remote: Array<Record<string, string>> = [
      { 'x-forwarded-for': '203.0.113.7' },
      { 'x-forwarded-for': '127.0.0.1, 203.0.113.7' },
      { 'x-forwarded-for': '203.0.113.7, 127.0.0.1' },
      { 'x-real-ip': '198.51.100.17' },
      { forwarded: 'for=198.51.100.17;proto=https' },
      { forwarded: 'for=127.0.0.1, for="[2001:db8:cafe::17]:4711"' },
      { forwarded: 'for=unknown' },
    ];
    for (const headers of remote) assert.equal(await status(headers), 403, `a client elsewhere, through a proxy here: ${JSON.stringify(headers)}`);
  });

  it('stops its worker on SIGTERM', async () => {
    sample.child.kill('SIGTERM');
    // Nest's shutdown hooks close the app, then raise the signal again
    assert.deepEqual(await sample.exited, { code: null, signal: 'SIGTERM' }, sample.output);
    assert.match(sample.output, /Worker \S+ stopped/);
  });
});
