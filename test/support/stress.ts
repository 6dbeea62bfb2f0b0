/**
 * `npm run test:stress`: the flake budget. Runs the whole suite RUNS times (default 10),
 * PARALLEL at once (default 2) to load the machine, each run as `npm test` runs it (its own
 * embedded PostgreSQL, or DATABASE_URL), and prints the failures per file. Arguments filter
 * the files as for `npm test`. Logs go to .data/stress/<stamp>/run-<n>.log.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

interface Failure {
  file?: string;
  name: string;
  error: string;
}

interface RunResult {
  run: number;
  code: number | null;
  seconds: number;
  failures: Failure[];
  log: string;
}

const positive = (name: string, fallback: number) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer`);
  return value;
};

async function runOnce(run: number, dir: string, filters: string[]): Promise<RunResult> {
  const log = join(dir, `run-${run}.log`);
  const failuresFile = join(dir, `run-${run}.failures.jsonl`);
  const out = openSync(log, 'w');
  const started = Date.now();
  const code = await new Promise<number | null>((resolve) => {
    const child = spawn(process.execPath, [join(__dirname, 'run-tests.js'), ...filters], {
      env: { ...process.env, TEST_FAILURES_FILE: failuresFile },
      stdio: ['ignore', out, out],
    });
    child.on('error', () => resolve(null));
    child.on('exit', (exitCode) => resolve(exitCode));
  });
  const failures = existsSync(failuresFile)
    ? readFileSync(failuresFile, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Failure)
    : [];
  // a run that failed without a failed test (the runner itself crashed) still counts
  if (code !== 0 && failures.length === 0) failures.push({ name: '(the run itself)', error: `exit code ${code}, see ${log}` });
  return { run, code, seconds: (Date.now() - started) / 1000, failures, log };
}

async function main(): Promise<number> {
  const runs = positive('RUNS', 10);
  const parallel = positive('PARALLEL', 2);
  const filters = process.argv.slice(2);
  const dir = join(process.cwd(), '.data', 'stress', new Date().toISOString().replace(/[:.]/g, '-'));
  mkdirSync(dir, { recursive: true });
  const target = process.env.DATABASE_URL ? 'DATABASE_URL' : 'an embedded PostgreSQL per run';
  console.log(`stress: ${runs} runs of the suite${filters.length ? ` (${filters.join(', ')})` : ''}, ${parallel} at once, on ${target}; logs in ${dir}`);

  const results: RunResult[] = [];
  let next = 1;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next <= runs) {
        const result = await runOnce(next++, dir, filters);
        results.push(result);
        const verdict = result.code === 0 ? 'passed' : `FAILED (${result.failures.length} failure(s))`;
        console.log(`run ${result.run}: ${verdict} in ${result.seconds.toFixed(0)} s`);
      }
    }),
  );

  const byFile = new Map<string, Failure[]>();
  for (const result of results) for (const failure of result.failures) {
    const file = failure.file ? failure.file.replace(/^.*\/dist\//, '') : '(unknown file)';
    byFile.set(file, [...(byFile.get(file) ?? []), failure]);
  }
  const failedRuns = results.filter((r) => r.code !== 0);
  console.log(`\nstress: ${runs - failedRuns.length} of ${runs} runs passed`);
  for (const [file, failures] of [...byFile].sort()) {
    console.log(`  ${file}: ${failures.length} failure(s)`);
    for (const failure of failures) console.log(`    - ${failure.name}: ${failure.error}`);
  }
  for (const run of failedRuns) console.log(`  log of failed run ${run.run}: ${run.log}`);
  return failedRuns.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
