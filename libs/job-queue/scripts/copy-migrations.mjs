// Copies the repository's migrations/ into libs/job-queue/src/migrations/ (gitignored), so
// that the library imports nothing from outside its folder and its package carries the
// migrations it runs. migrations/ stays the one source: the tests, the sample and
// test/fixtures/pack-previous-version.sh use it, and every build (`npm run build`,
// `npm run build:lib`) makes the copy afresh. The only change: the migrations' imports of
// the library (`../libs/job-queue/src/x`) become `../x`, valid from the copy's place.
import { chmodSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const lib = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(lib, '..', '..', 'migrations');
const target = join(lib, 'src', 'migrations');
const LIBRARY = '../libs/job-queue/src/';

/** `from '…'`, `import '…'`, `import('…')` and `require('…')` specifiers. */
const SPECIFIER = /(\bfrom\s*|\bimport\s*\(?\s*|\brequire\s*\(\s*)(['"])([^'"]+)\2/g;

function rewrite(name, text) {
  return text.replace(SPECIFIER, (whole, lead, quote, specifier) => {
    if (specifier.startsWith(LIBRARY)) return `${lead}${quote}../${specifier.slice(LIBRARY.length)}${quote}`;
    if (specifier.startsWith('../')) {
      throw new Error(`migrations/${name} imports ${specifier}: a migration may import only other migrations (./) and the library (${LIBRARY}…)`);
    }
    return whole;
  });
}

export function copyMigrations() {
  const files = readdirSync(source).filter((name) => name.endsWith('.ts')).sort();
  if (!files.includes('index.ts')) throw new Error(`no index.ts in ${source}`);
  rmSync(target, { recursive: true, force: true });
  mkdirSync(target, { recursive: true });
  for (const name of files) {
    const header = `// Generated from migrations/${name} by libs/job-queue/scripts/copy-migrations.mjs. Edit that file, not this one.\n`;
    const file = join(target, name);
    writeFileSync(file, header + rewrite(name, readFileSync(join(source, name), 'utf8')));
    chmodSync(file, 0o444); // read-only, so that an editor warns before a change that the next build would undo
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) copyMigrations(); // `npm run build` runs this file
