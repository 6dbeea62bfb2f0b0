// Writes the files that the guide "Testing your app" (docs/guides/testing-your-app.md) shows
// into an app folder: each ```ts block there whose first line is `// <path>` (src/signup.ts,
// test/signup.e2e-spec.ts). The consumer check compiles and runs them, so that the guide's
// example is the code it tests. The whole file is read: it is that one guide.
// Usage: node readme-files.mjs <docs/guides/testing-your-app.md> <app folder>
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';

const [guidePath, appDir] = process.argv.slice(2);
if (!guidePath || !appDir) throw new Error('usage: node readme-files.mjs <docs/guides/testing-your-app.md> <app folder>');
const guide = readFileSync(guidePath, 'utf8');
if (!/^# Testing your app$/m.test(guide)) throw new Error(`${guidePath}: not the guide "Testing your app" (no "# Testing your app" heading)`);

const written = [];
for (const [, code] of guide.matchAll(/```ts\n([\s\S]*?)```/g)) {
  const path = /^\/\/ ([\w./-]+\.ts)\n/.exec(code)?.[1];
  if (!path) continue;
  const relative = normalize(path);
  if (relative.startsWith('..') || relative.startsWith('/')) throw new Error(`${guidePath}: path ${path} leaves the app`);
  mkdirSync(dirname(join(appDir, relative)), { recursive: true });
  writeFileSync(join(appDir, relative), code);
  written.push(relative);
}
if (!written.includes('src/signup.ts') || !written.some((file) => file.endsWith('.e2e-spec.ts'))) {
  throw new Error(`${guidePath} should show src/signup.ts and a test/*.e2e-spec.ts; found: ${written.join(', ') || 'nothing'}`);
}
console.log(`from ${guidePath}: ${written.join(', ')}`);
