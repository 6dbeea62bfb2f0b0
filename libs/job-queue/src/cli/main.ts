#!/usr/bin/env node
// The package's bin, `nestjs-job-queue` (package.json "bin"): see program.ts, and docs/guides/cli.md.
import { runCli } from './program';

// A reader that stopped reading (`| head`) is no failure of the command: end quietly, as Unix tools do.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
  process.exit(typeof process.exitCode === 'number' ? process.exitCode : 0);
});

void runCli(process.argv).then((code) => {
  process.exitCode = code;
  // Everything is closed by now; should a handle still hold the process, do not hang a pipeline on it.
  setTimeout(() => process.exit(code), 5_000).unref();
});
