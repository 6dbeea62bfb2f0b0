import type { QueryRunner } from 'typeorm';
import { applyOnce, forget, type JobQueueMigration } from './ledger';
import { quoteIdentifier } from './names';

/**
 * Schedules kept in the database (`upsertSchedule`, `pauseSchedule`, `listSchedules`): the row
 * of `known_crontabs` that already claims each tick exactly once (`last_execution`) becomes the
 * whole definition of its schedule, and every replica ticks what the row says.
 *
 * - `kind`: `code` (a `@Cron` or crontab line, written by the replicas that declare it at
 *   startup: the latest to start wins) or `runtime` (upsertSchedule). Rows written by workers
 *   of earlier versions get `code`, which is what they are.
 * - `every_ms`: an interval schedule (ticks at whole multiples of it since the epoch), instead
 *   of `expression`.
 * - `payload`, `queue_name`, `priority`, `max_attempts`, `backfill_ms`: what each tick's job
 *   carries, and how far back missed ticks are added.
 * - `paused_at`: set while the schedule is paused; no tick is claimed then. `resumed_at`: the
 *   last resume; ticks before it are never added late (a pause skips its ticks).
 * - `revision`: raised by every change of the definition. A tick is claimed only under the
 *   revision it was computed from, so a replica that has not yet read a change cannot tick the
 *   old definition. `updated_at`: when the definition last changed.
 *
 * Workers of earlier versions read none of these: they tick their own `@Cron` as declared in
 * their code, and never tick a runtime schedule (see docs/guides/cron.md). The columns are
 * nullable or have constant defaults (no rewrite) on a table of a few rows; one transaction,
 * and it can run again.
 */
export function createSchedulesMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);

  return class Schedules1764700000000 implements JobQueueMigration {
    readonly name = 'Schedules1764700000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, async () => {
        await q.query(`
          alter table ${s}.known_crontabs
            add column if not exists kind text not null default 'code',
            add column if not exists every_ms bigint,
            add column if not exists payload jsonb,
            add column if not exists queue_name text,
            add column if not exists priority integer,
            add column if not exists max_attempts integer,
            add column if not exists backfill_ms bigint,
            add column if not exists paused_at timestamptz,
            add column if not exists resumed_at timestamptz,
            add column if not exists revision bigint not null default 0,
            add column if not exists updated_at timestamptz`);
        await q.query(`alter table ${s}.known_crontabs drop constraint if exists known_crontabs_kind_check`);
        await q.query(`alter table ${s}.known_crontabs add constraint known_crontabs_kind_check check (kind in ('code', 'runtime'))`);
      });
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(`delete from ${s}.known_crontabs where kind = 'runtime'`);
      await q.query(`
        alter table ${s}.known_crontabs drop constraint if exists known_crontabs_kind_check,
          drop column if exists kind, drop column if exists every_ms, drop column if exists payload,
          drop column if exists queue_name, drop column if exists priority, drop column if exists max_attempts,
          drop column if exists backfill_ms, drop column if exists paused_at, drop column if exists resumed_at,
          drop column if exists revision, drop column if exists updated_at`);
      await forget(q, schema, this.name);
    }
  };
}
