import type { QueryRunner } from 'typeorm';
import { applyOnce, forget, type JobQueueMigration } from './ledger';
import { quoteIdentifier } from './names';

/**
 * Pause and resume (`pauseQueue`, `pauseTask`, `listPaused()`): `pauses` holds one row per
 * paused task (`kind` 'task', `name` its identifier, '*' for every task) or named queue
 * (`kind` 'queue'), with the time it was paused. Workers read it at start, again when told on
 * the jobs channel (payload `paused`) and at each poll, and leave out of their claims what it
 * names (sql/claim.ts, $1 and $6); the health check and the telemetry gauge leave paused jobs
 * out of the jobs nobody runs.
 *
 * A new table only: workers of the previous versions never read it and keep claiming paused
 * jobs (the README's rolling-deploy notes say so). One transaction, and it can run again.
 */
export function createPausesMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);

  return class Pauses1764600000000 implements JobQueueMigration {
    readonly name = 'Pauses1764600000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, async () => {
        await q.query(`
          create table if not exists ${s}.pauses (
            kind text not null check (kind in ('task', 'queue')),
            name text not null,
            paused_at timestamptz not null default now(),
            primary key (kind, name)
          )`);
      });
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(`drop table if exists ${s}.pauses`);
      await forget(q, schema, this.name);
    }
  };
}
