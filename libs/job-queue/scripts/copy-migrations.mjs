// For the package build only (scripts/build.mjs): copies the repository's migrations/ into
// libs/job-queue/src/migrations/ (gitignored), so that the package carries the migrations it
// runs, compiled to dist/migrations/ (the package.json's "imports" maps `#migrations` there)
// with their sources beside the rest for the source maps. The repository itself never needs
// the copy: its tsconfig maps `#migrations` to migrations/ (a fresh clone type-checks as it is).
// The migrations import nothing outside migrations/ (the migrations-self-contained rule of
// .dependency-cruiser.cjs), so a copy is the same code.
import { chmodSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const lib = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(lib, '..', '..', 'migrations');
const target = join(lib, 'src', 'migrations');

export function copyMigrations() {
  const files = readdirSync(source).filter((name) => name.endsWith('.ts')).sort();
  if (!files.includes('index.ts')) throw new Error(`no index.ts in ${source}`);
  rmSync(target, { recursive: true, force: true });
  mkdirSync(target, { recursive: true });
  for (const name of files) {
    const text = readFileSync(join(source, name), 'utf8');
    const header = `// Copied from migrations/${name} by libs/job-queue/scripts/copy-migrations.mjs for the package. Edit that file, not this one.\n`;
    const file = join(target, name);
    writeFileSync(file, header + text);
    chmodSync(file, 0o444); // read-only, so that an editor warns before a change that the next build would undo
  }
}
