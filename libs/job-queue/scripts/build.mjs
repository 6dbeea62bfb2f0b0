// `npm run build:lib` (and the package's prepack): builds libs/job-queue as it is published.
// The copy of migrations/ into src/migrations/, a clean dist/ compiled from src/ alone (so
// that dist/ mirrors src/ and the package imports nothing from outside its folder), the
// README and LICENSE; then a check that every path the package.json names was built.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { copyMigrations } from './copy-migrations.mjs';
import { writePackageDocs } from './package-docs.mjs';

const lib = join(dirname(fileURLToPath(import.meta.url)), '..');

copyMigrations();
rmSync(join(lib, 'dist'), { recursive: true, force: true });
// The repository's TypeScript, by its package.json's `bin` (its `exports` do not list bin/tsc).
const typescript = createRequire(join(lib, '..', '..', 'package.json')).resolve('typescript/package.json');
const tsc = join(dirname(typescript), JSON.parse(readFileSync(typescript, 'utf8')).bin.tsc);
const compiled = spawnSync(process.execPath, [tsc, '-p', join(lib, 'tsconfig.lib.json')], { stdio: 'inherit' });
if (compiled.status !== 0) process.exit(compiled.status ?? 1);
writePackageDocs();

const manifest = JSON.parse(readFileSync(join(lib, 'package.json'), 'utf8'));
const targets = [
  manifest.main,
  manifest.types,
  ...Object.values(manifest.bin ?? {}),
  ...Object.values(manifest.exports).flatMap((target) => (typeof target === 'string' ? [target] : Object.values(target))),
];
const missing = targets.filter((target) => !existsSync(join(lib, target)));
if (missing.length > 0) {
  console.error(`build:lib: package.json names files the build did not make: ${missing.join(', ')}`);
  process.exit(1);
}
