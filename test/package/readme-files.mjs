// Writes the files that the README's "Testing your app" shows into an app folder: each ```ts
// block there whose first line is `// <path>` (src/signup.ts, test/signup.e2e-spec.ts). The
// consumer check compiles and runs them, so that the README's example is the code it tests.
// Usage: node readme-files.mjs <README.md> <app folder>
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';

const [readmePath, appDir] = process.argv.slice(2);
const readme = readFileSync(readmePath, 'utf8');
const start = readme.indexOf('\n### Testing your app\n');
if (start === -1) throw new Error(`${readmePath}: no "### Testing your app" section`);
const end = readme.indexOf('\n#', start + 1); // the next heading (a `#` inside a code block starts no line)
const section = readme.slice(start, end === -1 ? undefined : end);

const written = [];
for (const [, code] of section.matchAll(/```ts\n([\s\S]*?)```/g)) {
  const path = /^\/\/ ([\w./-]+\.ts)\n/.exec(code)?.[1];
  if (!path) continue;
  const relative = normalize(path);
  if (relative.startsWith('..') || relative.startsWith('/')) throw new Error(`README path ${path} leaves the app`);
  mkdirSync(dirname(join(appDir, relative)), { recursive: true });
  writeFileSync(join(appDir, relative), code);
  written.push(relative);
}
if (!written.includes('src/signup.ts') || !written.some((file) => file.endsWith('.e2e-spec.ts'))) {
  throw new Error(`README "Testing your app" should show src/signup.ts and a test/*.e2e-spec.ts; found: ${written.join(', ') || 'nothing'}`);
}
console.log(`from the README: ${written.join(', ')}`);
