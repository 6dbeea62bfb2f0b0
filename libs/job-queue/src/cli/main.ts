#!/usr/bin/env node
// The package's bin, `nestjs-job-queue` (package.json "bin"): see program.ts, and docs/guides/cli.md.
import { runCli } from './program';

void runCli(process.argv).then((code) => {
  process.exitCode = code;
  // Everything is closed by now; should a handle still hold the process, do not hang a pipeline on it.
  setTimeout(() => process.exit(code), 5_000).unref();
});
