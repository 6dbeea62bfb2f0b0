import assert from 'node:assert/strict';
import type { Provider } from '@nestjs/common';
import { createTestApp } from './app';
import { OldWorkerProcess } from './previous-version';
import { limitedHoldTasks, migrationNames, migrationsThrough, NewTasks, warningsLogger, type UpgradeSetup } from './upgrade';
import { waitFor } from './wait';

/** The new version's `hold` (no limit) and `marker`. */
const HoldTasks = limitedHoldTasks({});

/**
 * The rolling deploy of a migration that changes nothing an old worker does (an index, a table's
 * setting), the way its upgrade tests cause it: a worker of u's previous version (every migration
 * through `oldThrough`) runs a `hold` job and has added a backlog of 500 `record` jobs; the new
 * version's app (u.app) migrates under them, then `afterMigration` checks what it made; the new
 * app adds 500 more, both versions drain all 1,000, each once, and the held job finishes. Returns
 * the warnings and errors the new app logged.
 */
export async function drainBesideOldWorker(
  u: UpgradeSetup,
  { oldThrough, newMigration, afterMigration }: { oldThrough: string; newMigration: string; afterMigration: () => Promise<void> },
): Promise<string[]> {
  const { q } = u;
  const old = await OldWorkerProcess.start(u.previous, u.db.url);
  assert.deepEqual(old.library?.migrations, migrationsThrough(oldThrough), `the old version has every migration through ${oldThrough}`);
  const [running] = await old.add([{ identifier: 'hold', payload: { gate: 'g0' } }]);
  await old.waitForOutput(`started hold ${running}`, new RegExp(`^started hold ${running}$`, 'm'));
  const before = await old.add(Array.from({ length: 500 }, (_, n) => ({ identifier: 'record', payload: { n } })), { many: true });

  const { logger, logs } = warningsLogger();
  const providers: Provider[] = [NewTasks, HoldTasks];
  const t = (u.app = await createTestApp({ url: u.db.url, providers, logger, jobQueue: { pollInterval: 200, concurrency: 4 } }));
  assert.ok((await migrationNames(u.sql)).includes(newMigration), `${newMigration} applied`);
  await afterMigration();
  const after = (await t.jobs.addMany(Array.from({ length: 500 }, (_, n) => ({ identifier: 'record' as never, payload: { n: 500 + n } as never })))).map((job) => job.id);
  const all = [...before, ...after];
  await waitFor('every record job to run', async () => (await q('select 1 from runs where job_id = any($1::bigint[])', [all])).length === all.length, 30_000);
  assert.deepEqual(await q('select job_id from runs where job_id = any($1::bigint[]) group by job_id having count(*) > 1', [all]), [], 'each ran once');

  await old.open('g0');
  await waitFor('the held job to finish', async () => (await q('select 1 from job_queue.jobs where id = $1', [running])).length === 0);
  await old.terminate();
  return logs;
}
