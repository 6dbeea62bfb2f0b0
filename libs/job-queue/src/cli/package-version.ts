import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * This package's version, for --version and `validate`: the package.json of nestjs-job-queue
 * above this file (dist/cli/ in the package; dist/libs/job-queue/src/cli/ in the repository,
 * whose libs/job-queue/package.json is found from the repository's root).
 */
export function packageVersion(): string {
  for (let dir = __dirname; ; dir = dirname(dir)) {
    for (const candidate of [join(dir, 'package.json'), join(dir, 'libs', 'job-queue', 'package.json')]) {
      if (!existsSync(candidate)) continue;
      const manifest = JSON.parse(readFileSync(candidate, 'utf8')) as { name?: string; version?: string };
      if (manifest.name === 'nestjs-job-queue' && manifest.version) return manifest.version;
    }
    if (dirname(dir) === dir) return 'unknown';
  }
}
