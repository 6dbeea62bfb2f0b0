/** What the upgrade tests share: the table both versions' handlers record their runs in, and small helpers. */
import type { Client } from 'pg';
import type { OldWorkerProcess } from './previous-version';

export interface Run {
  job_id: string;
  pid: number;
  attempt: number;
  task: string;
  payload: Record<string, unknown>;
  at: Date;
}

/** The table the handlers of both versions record their runs in (old-worker.js and the tests' own tasks). */
export async function createRunsTable(sql: Client): Promise<void> {
  await sql.query(`create table runs (
    n bigint generated always as identity primary key,
    job_id bigint not null, pid int not null, attempt int not null, task text not null, payload jsonb,
    at timestamptz not null default clock_timestamp())`);
}

export async function migrationNames(sql: Client): Promise<string[]> {
  return (await sql.query<{ name: string }>('select name from job_queue.migrations order by id')).rows.map((row) => row.name);
}

/** Resolves once the old worker has printed `line` (a whole line). */
export function printed(old: OldWorkerProcess, line: string): Promise<void> {
  return old.waitForOutput(line, new RegExp(`^${line}$`, 'm'));
}

export function sortIds(ids: string[]): string[] {
  return [...ids].sort((a, b) => Number(a) - Number(b));
}

export function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
