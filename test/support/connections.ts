/**
 * Connection faults: what an administrator, a failover or a network blip does to the
 * connections of a running app. Scoped to the database `sql` is connected to (each test
 * file has its own), never touching `sql`'s own connection.
 */
import type { Queryable } from './wait';

/**
 * Terminates the other backends of this database that match `where` (SQL over
 * pg_stat_activity), waiting until each has gone, and returns how many there were.
 */
export async function terminateConnections(sql: Queryable, where = 'true', values: unknown[] = []): Promise<number> {
  const { rows } = await sql.query(
    `select count(*) filter (where pg_terminate_backend(pid, 10000))::int as n
       from pg_stat_activity
      where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend' and (${where})`,
    values,
  );
  return rows[0].n as number;
}

/** The workers' pinned connections (LISTEN, heartbeats, maintenance) on this database, by their application_name. */
export async function listenerPids(sql: Queryable): Promise<number[]> {
  const { rows } = await sql.query(
    `select pid from pg_stat_activity where datname = current_database() and application_name like 'nestjs-job-queue worker %' and pid <> pg_backend_pid() order by pid`,
  );
  return rows.map((r) => r.pid as number);
}
