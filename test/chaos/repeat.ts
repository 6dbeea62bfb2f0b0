/**
 * `npm run chaos:repeat`: RUNS chaos runs (default 10), PARALLEL at once (default 2), each with
 * a random seed and CHAOS_MS as set (default 2 minutes); prints each run's seed, result and
 * invariant lines, then how many passed. Logs go to .data/chaos/<stamp>/run-<n>.log.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const runs = Number(process.env.RUNS ?? 10);
const parallel = Number(process.env.PARALLEL ?? 2);
const dir = join(__dirname, '../../../.data/chaos', new Date().toISOString().replace(/[:.]/g, '-'));
mkdirSync(dir, { recursive: true });

function run(n: number): Promise<{ n: number; code: number | null; seconds: number; log: string }> {
  const log = join(dir, `run-${n}.log`);
  const out = openSync(log, 'w');
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(__dirname, 'main.js')], { env: { ...process.env, CHAOS_SEED: String(Math.floor(Math.random() * 2 ** 31)) }, stdio: ['ignore', out, out] });
    child.on('exit', (code) => resolve({ n, code, seconds: Math.round((Date.now() - started) / 1000), log }));
  });
}

async function main(): Promise<number> {
  console.log(`${runs} chaos runs, ${parallel} at once; logs in ${dir}`);
  let next = 1;
  let passed = 0;
  const worker = async () => {
    while (next <= runs) {
      const result = await run(next++);
      const text = readFileSync(result.log, 'utf8');
      const summary = text.split('\n').filter((line) => /^(chaos seed .*faults:|ok  |FAIL|chaos: )/.test(line));
      if (result.code === 0) passed += 1;
      console.log(`\nrun ${result.n}: exit ${result.code}, ${result.seconds} s\n${summary.join('\n')}`);
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
  console.log(`\n${passed} of ${runs} chaos runs passed`);
  return passed === runs ? 0 : 1;
}

main().then((code) => process.exit(code));
