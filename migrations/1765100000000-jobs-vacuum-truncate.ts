import type { QueryRunner } from 'typeorm';
import { applyOnce, forget, type JobQueueMigration } from './ledger';

/**
 * `jobs` with `vacuum_truncate = false`: no VACUUM of it (ours, maintenance/jobs-vacuum.ts, nor
 * autovacuum's) gives its empty end back to the operating system. To do that a vacuum takes the
 * table's ACCESS EXCLUSIVE lock, which every add, claim and release then waits behind; and under a
 * steady stream it tried for seconds to get it (PostgreSQL retries for up to 5 s). A queue's table
 * fills again at the next burst anyway. Measured in a sustained load at 1,500 jobs/s (durable
 * PostgreSQL 18; docs/benchmark.md, "Sustained load"): a vacuum of `jobs` took 1.42 s against
 * 20 ms, a release 598 µs against 342.
 *
 * The setting takes a SHARE UPDATE EXCLUSIVE lock, which adds, claims and releases do not wait
 * for (a running vacuum does). Workers of earlier versions are not affected otherwise.
 */
export function createJobsVacuumTruncateMigration(schema: string): new () => JobQueueMigration {
  return class JobsVacuumTruncate1765100000000 implements JobQueueMigration {
    readonly name = 'JobsVacuumTruncate1765100000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, async () => {
        // its TOAST table too: large payloads live there, and its truncation takes the same lock
        await q.query(`alter table "${schema}".jobs set (vacuum_truncate = false, toast.vacuum_truncate = false)`);
      });
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(`alter table "${schema}".jobs reset (vacuum_truncate, toast.vacuum_truncate)`);
      await forget(q, schema, this.name);
    }
  };
}
