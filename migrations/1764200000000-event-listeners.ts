import type { QueryRunner } from 'typeorm';
import { applyOnce, forget, type JobQueueMigration } from './ledger';
import { quoteIdentifier } from './names';

/**
 * Cluster-wide job events (`@OnQueueEvent`, `JobQueueService.queueEvents$`) are published
 * only while someone listens: `event_listeners` holds one row per subscribed process, with
 * the event types (and tasks) it wants and an expiry it renews every heartbeat. Releases read
 * the live rows to learn what to publish; with none, they publish nothing.
 *
 * A new table only: workers of the previous version never read it (they publish no events),
 * and nothing they run changes. One transaction, and it can run again.
 */
export function createEventListenersMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);

  return class EventListeners1764200000000 implements JobQueueMigration {
    readonly name = 'EventListeners1764200000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, async () => {
        await q.query(`
          create table if not exists ${s}.event_listeners (
            id text primary key,
            filter jsonb not null,
            expires_at timestamptz not null
          )`);
      });
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(`drop table if exists ${s}.event_listeners`);
      await forget(q, schema, this.name);
    }
  };
}
