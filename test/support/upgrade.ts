/** What the upgrade tests share: the new version's tasks, the table both versions' handlers record their runs in, and small helpers. */
import { Injectable, type LoggerService } from '@nestjs/common';
import type { Client } from 'pg';
import { DataSource } from 'typeorm';
import { Task, type JobContext } from '../../libs/job-queue/src';
import type { OldWorkerProcess } from './previous-version';

/**
 * The new version's handlers, in the test process: `record` as the old app's (old-worker.js);
 * `sleep` records its run at once, without sleeping (it only ever runs a job an old worker
 * gives back at shutdown). No `fail`: only the old worker runs those.
 */
@Injectable()
export class NewTasks {
  constructor(private readonly dataSource: DataSource) {}

  @Task('record')
  async record(payload: unknown, ctx: JobContext) {
    await this.dataSource.query('insert into runs (job_id, pid, attempt, task, payload) values ($1, $2, $3, $4, $5)', [
      ctx.job.id,
      process.pid,
      ctx.job.attempts,
      ctx.job.taskIdentifier,
      JSON.stringify(payload ?? null),
    ]);
  }

  @Task('sleep')
  async sleep(payload: unknown, ctx: JobContext) {
    await this.record(payload, ctx);
  }
}

/** A logger for the new app that keeps its warnings and errors (an upgrade must log none), and drops the rest. */
export function warningsLogger(): { logger: LoggerService; logs: string[] } {
  const logs: string[] = [];
  const logger: LoggerService = {
    log: () => undefined,
    warn: (message: unknown, context?: unknown) => void logs.push(`warn [${context}] ${message}`),
    error: (message: unknown, ...rest: unknown[]) => void logs.push(`error ${message} ${rest.join(' ')}`),
  };
  return { logger, logs };
}

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
