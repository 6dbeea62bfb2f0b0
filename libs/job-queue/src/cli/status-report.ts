import { countsReport, type JobCountRow, type JobCountsReport } from '../core/job-counts';
import { MAINTENANCE_LEASE } from '../sql/maintenance';
import { requireJobTables, type CliConnection } from './connection';
import { readMigrationPlan } from './migration-plan';

/** What `status` reports (its --json document). */
export interface Status {
  schema: string;
  pendingMigrations: string[];
  jobs: JobCountsReport;
  /** Due jobs no worker holds, and the one that waited longest. */
  due: { count: number; oldest: { id: string; task: string; queue: string | null; runAt: Date; ageSeconds: number } | null };
  workers: Array<{
    id: string;
    hostname: string | null;
    pid: number | null;
    concurrency: number | null;
    startedAt: Date;
    heartbeatAt: Date;
    heartbeatAgeSeconds: number;
    /** The sweep declares it dead once its heartbeat is older than this. */
    timeoutMs: number;
    overdue: boolean;
    running: number;
    prefetched: number;
  }>;
  /** The maintenance lease (sql/maintenance.ts): null when no one holds it or ever did. */
  maintenanceLeader: { holder: string; expiresAt: Date; expiresInSeconds: number; live: boolean } | null;
}

/** Reads everything with the statements the library itself uses: countJobs (as JobQueueService.countJobs), dueJobs, listWorkers, readLease. */
export async function readStatus(connection: CliConnection): Promise<Status> {
  await requireJobTables(connection);
  const plan = await readMigrationPlan(connection);
  const countRows = await connection.run<JobCountRow>('countJobs', []);
  const [due] = await connection.run<{ count: number }>('dueJobs', []);
  const [oldest] = await connection.run<{ id: string; task_identifier: string; queue_name: string | null; run_at: Date; age: number }>('oldestDueJob', []);
  const workers = await connection.run<WorkerRow>('listWorkers', []);
  const [lease] = await connection.run<{ holder: string; expires_at: Date; live: boolean; expires_in: number }>('readLease', [MAINTENANCE_LEASE]);
  return {
    schema: connection.schema,
    pendingMigrations: plan.pending.map((m) => m.name),
    jobs: countsReport(countRows),
    due: {
      count: due.count,
      oldest: oldest ? { id: oldest.id, task: oldest.task_identifier, queue: oldest.queue_name, runAt: oldest.run_at, ageSeconds: oldest.age } : null,
    },
    workers: workers.map((w) => {
      const age = (w.now.getTime() - w.heartbeat_at.getTime()) / 1000;
      return {
        id: w.id,
        hostname: w.hostname,
        pid: w.pid,
        concurrency: w.concurrency,
        startedAt: w.started_at,
        heartbeatAt: w.heartbeat_at,
        heartbeatAgeSeconds: age,
        timeoutMs: w.timeout_ms,
        overdue: age * 1000 > w.timeout_ms,
        running: w.running_count,
        prefetched: w.prefetched_count,
      };
    }),
    maintenanceLeader: lease ? { holder: lease.holder, expiresAt: lease.expires_at, expiresInSeconds: lease.expires_in, live: lease.live } : null,
  };
}

interface WorkerRow {
  id: string;
  hostname: string | null;
  pid: number | null;
  concurrency: number | null;
  started_at: Date;
  heartbeat_at: Date;
  timeout_ms: number;
  running_count: number;
  prefetched_count: number;
  now: Date;
}

