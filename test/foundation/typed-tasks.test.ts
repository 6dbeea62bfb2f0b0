import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';

const root = resolve(__dirname, '..', '..', '..'); // dist/test/foundation → the repository

/**
 * Typed tasks are a compile-time promise: test/types/typed-tasks.check.ts augments
 * JobQueueTasks as an app does (`declare module 'nestjs-job-queue'`), and marks each call the
 * compiler must refuse with `@ts-expect-error`. A wrong payload that compiled would leave its
 * directive unused, which tsc reports as an error: this test then fails.
 */
describe('typed tasks (JobQueueTasks)', () => {
  it('the compiler accepts the right names and payloads and refuses the wrong ones', () => {
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const result = spawnSync(process.execPath, [tsc, '-p', join(root, 'test', 'types', 'tsconfig.json')], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(result.status, 0, `tsc -p test/types failed:\n${result.stdout}${result.stderr}`);
  });
});
