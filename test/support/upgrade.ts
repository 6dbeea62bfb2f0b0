/** What the upgrade tests share: the new version's tasks, the table both versions' handlers record their runs in, and small helpers. */
import assert from 'node:assert/strict';
import { after, afterEach, before } from 'node:test';
import { Injectable, type LoggerService } from '@nestjs/common';
import type { Client } from 'pg';
import { DataSource } from 'typeorm';
import { createJobQueueMigrations, Task, type JobContext, type TaskOptions } from '../../libs/job-queue/src';
import { connect, createTestDatabase } from './database';
import type { TestApp } from './app';
import { installPreviousVersion, stopOldWorkers, type OldWorkerProcess, type PreviousVersionApp } from './previous-version';

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
    await recordRun(this.dataSource, payload, ctx);
  }

  @Task('sleep')
  async sleep(payload: unknown, ctx: JobContext) {
    await this.record(payload, ctx);
  }
}

/**
 * The new version's `hold`, with the limits `options` (the old worker's `hold` waits for its
 * gate; this one records its run at once), and `marker`, which only the new version has.
 */
export function limitedHoldTasks(options: TaskOptions) {
  @Injectable()
  class LimitedHoldTasks {
    constructor(readonly dataSource: DataSource) {}

    @Task('hold', options)
    async hold(payload: unknown, ctx: JobContext) {
      await recordRun(this.dataSource, payload, ctx);
    }

    @Task('marker')
    async marker(payload: unknown, ctx: JobContext) {
      await recordRun(this.dataSource, payload, ctx);
    }
  }
  return LimitedHoldTasks;
}

/** Records a run of the new version's handler in the runs table, as old-worker.js's `record` does. */
export async function recordRun(dataSource: DataSource, payload: unknown, ctx: JobContext): Promise<void> {
  await dataSource.query('insert into runs (job_id, pid, attempt, task, payload) values ($1, $2, $3, $4, $5)', [
    ctx.job.id,
    process.pid,
    ctx.job.attempts,
    ctx.job.taskIdentifier,
    JSON.stringify(payload ?? null),
  ]);
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

/**
 * This version's migrations after `name`, in order: what an upgrade test expects applied besides
 * the migrations it is about, so that a new migration changes no upgrade test's list.
 */
export function migrationsAfter(name: string): string[] {
  return allMigrations().slice(positionOf(name) + 1);
}

/** This version's migrations up to `name` included, in order: what a previous version that ends with it has. */
export function migrationsThrough(name: string): string[] {
  return allMigrations().slice(0, positionOf(name) + 1);
}

const allMigrations = () => createJobQueueMigrations().map((Migration) => (new Migration() as { name: string }).name);

function positionOf(name: string): number {
  const at = allMigrations().indexOf(name);
  assert.ok(at >= 0, `no migration ${name}`);
  return at;
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

/** What a rolling-deploy test works on: its database, a connection to it, the previous version installed, and two query helpers. */
export interface UpgradeSetup {
  db: Awaited<ReturnType<typeof createTestDatabase>>;
  sql: Client;
  previous: PreviousVersionApp;
  /** The new version's app, if the test started one: closed after each test, with every old worker stopped. */
  app?: TestApp;
  /** The rows of a statement on `sql`. */
  q<Row = Record<string, unknown>>(text: string, values?: unknown[]): Promise<Row[]>;
  /** The `id` column of a statement's rows. */
  ids(text: string, values?: unknown[]): Promise<string[]>;
}

/**
 * The hooks of a rolling-deploy test's describe(): before it, a database of its own (`name`)
 * with the runs table, and the package of `version` installed; after each test, the new app
 * (`app`) closed and every old worker stopped; after it, the database and package removed.
 * The fields are set once the before hook has run.
 */
export function upgradeSetup(name: string, version: string): UpgradeSetup {
  const setup = {
    async q<Row = Record<string, unknown>>(text: string, values: unknown[] = []) {
      return (await setup.sql.query(text, values)).rows as Row[];
    },
    async ids(text: string, values: unknown[] = []) {
      return (await setup.q<{ id: string }>(text, values)).map((row) => row.id);
    },
  } as UpgradeSetup;
  before(async () => {
    setup.db = await createTestDatabase(name);
    setup.sql = await connect(setup.db.url);
    await createRunsTable(setup.sql);
    setup.previous = installPreviousVersion(version);
  });
  afterEach(async () => {
    await setup.app?.close();
    setup.app = undefined;
    await stopOldWorkers();
  });
  after(async () => {
    await setup.sql?.end();
    await setup.db?.drop();
    setup.previous?.remove();
  });
  return setup;
}

/**
 * Queues `q-a` and `q-b`, each headed by a `sleep` job of `sleepMs` (an old worker takes and
 * holds them across a migration) with 15 `record` jobs behind it (payload `{ queue, seq }`,
 * seq 1 to 15, the sleep's 0): the ids of the sleeps and of the jobs behind them.
 */
export async function queuesHeadedBySleeps(u: UpgradeSetup, sleepMs: number): Promise<{ sleeps: string[]; queued: string[] }> {
  const sleeps: string[] = [];
  const queued: string[] = [];
  for (const queue of ['q-a', 'q-b']) {
    sleeps.push(...(await u.ids(`select id::text from job_queue.add_job('sleep', $1, queue_name => $2)`, [{ ms: sleepMs, queue, seq: 0 }, queue])));
    for (let seq = 1; seq <= 15; seq++) queued.push(...(await u.ids(`select id::text from job_queue.add_job('record', $1, queue_name => $2)`, [{ queue, seq }, queue])));
  }
  return { sleeps, queued };
}

/**
 * Asserts that the jobs `mustRun` ran, each exactly once, and that queues `q-a` and `q-b`
 * (queuesHeadedBySleeps) ran in order; returns the runs by job id.
 */
export function assertEachRanOnce(runs: Run[], mustRun: string[]): Map<string, Run[]> {
  const byJob = new Map<string, Run[]>();
  for (const run of runs) byJob.set(run.job_id, [...(byJob.get(run.job_id) ?? []), run]);
  assert.deepEqual([...byJob.keys()].sort(), [...mustRun].sort(), 'exactly the due jobs ran');
  assert.deepEqual(runs.filter((run) => byJob.get(run.job_id)!.length > 1), [], 'no job ran twice');
  for (const queue of ['q-a', 'q-b']) {
    assert.deepEqual(runs.filter((run) => run.payload?.queue === queue).map((run) => run.payload.seq), range(0, 15), `queue ${queue} ran in order`);
  }
  return byJob;
}

/** A flow step run by old-worker.js's `record` task, its payload naming its ref (OldWorkerProcess.addFlow). */
export function recordStep(ref: string, dependsOn: string[] = [], extra: object = {}) {
  return { ref, identifier: 'record', payload: { ref }, dependsOn, ...extra };
}

/** Flow `flowId`'s state (its flows row), or undefined. */
export async function flowState(u: UpgradeSetup, flowId: string): Promise<string | undefined> {
  return (await u.q<{ state: string }>('select state from job_queue.flows where id = $1', [flowId]))[0]?.state;
}

/** Asserts that flow `flowId` left nothing behind: no blocked job (of any flow) and no unfinished job counted. */
export async function assertFlowSettled(u: UpgradeSetup, flowId: string): Promise<void> {
  const [left] = await u.q<{ blocked: number; unfinished: number }>(
    `select (select count(*)::int from job_queue.blocked_jobs) as blocked, (select unfinished from job_queue.flows where id = $1) as unfinished`,
    [flowId],
  );
  assert.deepEqual(left, { blocked: 0, unfinished: 0 });
}
