/**
 * `npm test`: runs every dist/test/**\/*.test.js with node's test runner against
 * DATABASE_URL when it is set, otherwise against an embedded PostgreSQL started once for
 * the whole run. Each test file makes its own database on that server (support/database.ts).
 * Arguments filter the files by name: `npm test -- worker`.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../apps/embedded-postgres';
import { chromiumPath, NO_BROWSER_MESSAGE } from './chromium';

function testFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return testFiles(path);
    return name.endsWith('.test.js') ? [path] : [];
  });
}

async function main(): Promise<number> {
  const filters = process.argv.slice(2);
  const files = testFiles(join(__dirname, '..')).filter((file) => filters.length === 0 || filters.some((f) => file.includes(f)));
  // with no file, node --test would look for tests itself and run the support files too
  if (files.length === 0) throw new Error(`no test file matches ${filters.map((f) => `"${f}"`).join(', ')}`);
  let embedded: EmbeddedPostgres | undefined;
  let dataDir: string | undefined;
  const env = { ...process.env };
  if (!env.DATABASE_URL) {
    dataDir = mkdtempSync(join(tmpdir(), 'jq-test-pg-'));
    try {
      embedded = await startEmbeddedPostgres({ dataDir, persistent: false });
    } catch (error) {
      rmSync(dataDir, { recursive: true, force: true });
      throw error;
    }
    env.DATABASE_URL = embedded.url;
    console.log(`Embedded PostgreSQL started for the tests (${embedded.url})`);
  } else {
    console.log('Testing against DATABASE_URL');
  }
  try {
    return await new Promise<number>((resolve) => {
      // TEST_FAILURES_FILE (set by stress.ts): failed tests as JSON lines, beside the spec report
      const failuresFile = env.TEST_FAILURES_FILE;
      const reporters = failuresFile
        ? ['--test-reporter=spec', '--test-reporter-destination=stdout', `--test-reporter=${join(__dirname, 'failures-reporter.js')}`, `--test-reporter-destination=${failuresFile}`]
        : ['--test-reporter=spec'];
      // A hang fails its test after 3 minutes, and a file that left a handle open (an app not
      // closed after a failed wait) exits when its tests are done: a stuck run never blocks CI.
      const limits = ['--test-timeout=180000', '--test-force-exit'];
      const child = spawn(process.execPath, ['--test', ...limits, ...reporters, ...files], { env, stdio: 'inherit' });
      child.on('error', (error) => {
        console.error(`could not start the test runner: ${error.message}`);
        resolve(1);
      });
      child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
    });
  } finally {
    await embedded?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  }
}

main().then(
  (code) => {
    // said last, where it is seen: the spec reporter's "# SKIP" lines scroll away
    if (!chromiumPath() && !process.env.CI) console.log(`\n${NO_BROWSER_MESSAGE}`);
    process.exit(code);
  },
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
