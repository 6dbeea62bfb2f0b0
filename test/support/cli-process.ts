/**
 * The bin `nestjs-job-queue` as a pipeline runs it, for the CLI's tests: the compiled entry
 * (what the package's "bin" points at, built by `npm test`'s build) in a process of its own,
 * DATABASE_URL in its environment.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';

const BIN = join(__dirname, '..', '..', 'libs', 'job-queue', 'src', 'cli', 'main.js');

/**
 * The bin with its output piped to a reader that stops after the first chunk, as `| head -1`
 * does: its exit code and what it wrote to stderr.
 */
export function cliIntoClosedPipe(...args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout.once('data', () => child.stdout.destroy());
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the bin with `args`, DATABASE_URL set to `url` (none when undefined) and `env` added, and waits for it to exit. */
export function cli(url: string | undefined, ...args: string[]): Promise<Run> {
  return cliWithEnv({}, url, ...args);
}

export function cliWithEnv(extra: Record<string, string>, url: string | undefined, ...args: string[]): Promise<Run> {
  const env = { ...process.env };
  delete env.DATABASE_URL;
  delete env.JOB_QUEUE_TRANSACTION_POOLING;
  if (url !== undefined) env.DATABASE_URL = url;
  Object.assign(env, extra);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** What a run printed, for a failed assertion's message. */
export const printed = ({ code, stdout, stderr }: Run) => `exit ${code}\n--- stdout\n${stdout}--- stderr\n${stderr}`;

/** The run ended with `code` and printed exactly one line on stderr, `CODE: …`, with no stack trace. */
export function assertOneLineError(run: Run, code: number, errorCode: string): void {
  assert.equal(run.code, code, printed(run));
  const lines = run.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, `one line on stderr:\n${printed(run)}`);
  assert.match(lines[0], new RegExp(`^${errorCode}: \\S`), printed(run));
  assert.doesNotMatch(run.stderr, /\n\s+at /, 'no stack trace');
}
