// The package's README.md, LICENSE and docs/ (the guides the README links to), written into
// libs/job-queue/ at each `npm run build:lib` (all gitignored): the README is the repository's README less its repo-only parts (the
// regions between `<!-- repo-only:start -->` and `<!-- repo-only:end -->`: running the
// sample, the repository's tests, the benchmark, the layout), so that there is one text to
// keep true; the LICENSE is the repository's.
import { copyFileSync, cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const lib = join(dirname(fileURLToPath(import.meta.url)), '..');
const repo = join(lib, '..', '..');
const START = '<!-- repo-only:start -->';
const END = '<!-- repo-only:end -->';

export function packageReadme(text) {
  const kept = [];
  let from = 0;
  for (;;) {
    const start = text.indexOf(START, from);
    const end = text.indexOf(END, from);
    if (start === -1 && end === -1) break;
    if (start === -1 || end < start) throw new Error(`README.md: ${END} without a ${START} before it`);
    const next = text.indexOf(START, start + START.length);
    if (end === -1 || (next !== -1 && next < end)) throw new Error(`README.md: ${START} not closed by ${END}`);
    kept.push(text.slice(from, start));
    from = end + END.length;
  }
  kept.push(text.slice(from));
  if (kept.length === 1) throw new Error(`README.md has no ${START} region: the package README would carry the repository's sections`);
  const readme = kept.join('').replace(/\n{3,}/g, '\n\n').trimEnd();
  return `${readme}\n\n## License\n\nMIT (see LICENSE).\n`;
}

export function writePackageDocs() {
  writeFileSync(join(lib, 'README.md'), packageReadme(readFileSync(join(repo, 'README.md'), 'utf8')));
  copyFileSync(join(repo, 'LICENSE'), join(lib, 'LICENSE'));
  // The user's documents, so that the README's relative links work in node_modules too: the
  // guides, the guarantees, the benchmark (and its earlier rounds), scaling and the images they show (not the maintainers' notes).
  rmSync(join(lib, 'docs'), { recursive: true, force: true });
  for (const path of ['guides', 'images', 'guarantees.md', 'benchmark.md', 'benchmark-history.md', 'scaling.md']) {
    cpSync(join(repo, 'docs', path), join(lib, 'docs', path), { recursive: true });
  }
}
