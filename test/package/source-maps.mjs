// Every source map in an installed package names sources that exist in that package, so
// that a stack trace or a debugger in a user's app leads to the TypeScript it ran.
// Usage: node source-maps.mjs <node_modules/nestjs-job-queue>
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

const root = resolve(process.argv[2]);
const maps = readdirSync(join(root, 'dist'), { recursive: true }).filter((file) => file.endsWith('.map'));
const broken = maps.flatMap((file) => {
  const map = JSON.parse(readFileSync(join(root, 'dist', file), 'utf8'));
  return map.sources
    .map((source) => resolve(dirname(join(root, 'dist', file)), map.sourceRoot ?? '', source))
    .filter((source) => !source.startsWith(root + '/') || !existsSync(source))
    .map((source) => `${file} → ${source}`);
});
if (maps.length === 0 || broken.length > 0) {
  console.error(maps.length === 0 ? `no source maps in ${root}/dist` : `source maps naming missing files:\n${broken.join('\n')}`);
  process.exit(1);
}
console.log(`${maps.length} source maps, every source in the package`);
