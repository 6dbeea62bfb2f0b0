/**
 * The hooks of a describe() whose tests run worker processes (worker-processes.ts): before it, a
 * database of its own (`label`) with the test's tables and an app with no worker that adds the
 * processes' jobs (`externalTasks`); after each test, its processes stopped; after it, all closed.
 * The fields are set once the before hook has run; a test starts its processes with `start()`.
 */
import { after, afterEach, before } from 'node:test';
import type { Client } from 'pg';
import { createTestApp, type TestApp } from './app';
import { connect, createTestDatabase } from './database';
import { startWorkerProcesses, stopWorkerProcesses, type WorkerProcess, type WorkerProcessOptions } from './worker-processes';

/** The table the `limited` task of worker-process.ts (LIMITED=1) records its attempts in. */
export const LIMITED_RUNS_TABLE = `create table limited_runs (
  job_id bigint not null, pid int not null, attempt int not null, started_at timestamptz not null, ended_at timestamptz, group_key text,
  primary key (job_id, attempt))`;

export interface ProcessSuite {
  db: Awaited<ReturnType<typeof createTestDatabase>>;
  sql: Client;
  /** The app that adds jobs: no worker. */
  t: TestApp;
  /** Starts `count` worker processes on the suite's database, stopped after the test. */
  start(count: number, options: Omit<WorkerProcessOptions, 'url'>): Promise<WorkerProcess[]>;
}

export function processSuite(label: string, { externalTasks, tables }: { externalTasks: string[]; tables: string[] }): ProcessSuite {
  let processes: WorkerProcess[] = [];
  const suite = {
    async start(count: number, options: Omit<WorkerProcessOptions, 'url'>) {
      const started = await startWorkerProcesses(count, { url: suite.db.url, ...options });
      processes.push(...started);
      return started;
    },
  } as ProcessSuite;
  before(async () => {
    suite.db = await createTestDatabase(label);
    suite.sql = await connect(suite.db.url);
    suite.t = await createTestApp({ url: suite.db.url, jobQueue: { worker: false, externalTasks } });
    for (const table of tables) await suite.sql.query(table);
  });
  afterEach(async () => {
    for (const p of processes) await p.terminate();
    processes = [];
    await stopWorkerProcesses();
  });
  after(async () => {
    await stopWorkerProcesses();
    await suite.t?.close();
    await suite.sql?.end();
    await suite.db?.drop();
  });
  return suite;
}
