import { cpus, totalmem } from 'node:os';
import { describeSlices, sliceSizes, type AddsResult } from './adds-interleaved';
import type { BenchConfig } from './config';
import type { ServerSettings } from './database';
import { cell, medianOf, perRound, printGrid, values, type Kind } from './report-format';
import { printPooler } from './report-pooler';
import { printScale } from './report-scale';
import type { FlowResult } from './flows';
import { printFlows } from './report-flows';
import type { PoolerResult } from './pooler';
import type { ScaleResult } from './scale';
import type { SqlLimitResult } from './sql-limit';
import type { SustainedResult } from './sustained';
import type { Latency, SuiteResult, WorkerMode } from './suite';

export interface Setting {
  server: string;
  settings: ServerSettings;
  graphileWorkerVersion: string;
}

/** Everything measured in one round. */
export interface RoundResult {
  /** add() one at a time of the four adders and addMany() of the two queues, measured interleaved in one phase. */
  adds: AddsResult;
  ours: SuiteResult;
  /** nestjs-job-queue's flows against as many plain jobs (flows.ts). */
  flows: FlowResult;
  theirs: SuiteResult;
  sqlLimit: SqlLimitResult;
  /** Absent with PROCESSES=0 and without SCALE=1. */
  scale?: ScaleResult;
  /** Absent with POOLER=0 or without PgBouncer. */
  pooler?: PoolerResult;
  /** With SUSTAINED=1 only (sustained.ts). */
  sustained?: SustainedResult;
}

/** One line of a table: a value per round for each side. */
interface Row {
  line: string;
  ours: number[];
  other: number[];
  kind: Kind;
}

/**
 * The machine and the server, then tables of medians over the rounds with their min–max:
 * ours against graphile-worker (ratio of medians, > 1 means nestjs-job-queue is better),
 * ours against the same statements in plain SQL (ours as a percentage of the plain SQL), and
 * our drains with and without a history of completed jobs, with their ratios.
 */
export function printReport(config: BenchConfig, setting: Setting, rounds: RoundResult[]): void {
  const cpu = cpus();
  const { settings } = setting;
  console.log('');
  console.log(`machine:    ${cpu[0]?.model ?? 'unknown CPU'}, ${cpu.length} CPUs, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, Node ${process.version}`);
  console.log(`server:     ${setting.server}; a fresh database per system and round`);
  console.log(`postgres:   ${settings.version}`);
  console.log(`durability: fsync=${settings.fsync}, synchronous_commit=${settings.synchronousCommit} (read from the server)`);
  if (settings.synchronousCommit === 'off') console.log('WARNING:    synchronous_commit is off: commits do not wait for the disk, adds look faster than in production');
  console.log(
    `settings:   JOBS=${config.jobs} CONCURRENCY=${config.concurrency} LATENCY_SAMPLES=${config.latencySamples} ROUNDS=${config.rounds} HISTORY=${config.history} ` +
      `PROCESSES=${config.processes} SCALE=${config.scale ? 1 : 0}${config.scale ? ` BACKLOG=${config.backlog}` : ''}, ` +
      `pollInterval ${config.pollInterval} ms, pool ${config.poolSize} connections, graphile-worker ${setting.graphileWorkerVersion}`,
  );
  const scaleLines = [config.processes > 0 ? 'worker processes' : '', config.scale ? 'backlog' : ''].filter(Boolean).join(', then ');
  console.log(
    'rounds:     each round runs add() one at a time of both queues and both plain-SQL adders and addMany() of both queues, interleaved, then nestjs-job-queue (then its lifecycle drains, then its flows), ' +
      'then graphile-worker (default, then batched), then plain SQL' +
      (scaleLines ? `, then the scale lines (${scaleLines})` : '') +
      (rounds.some((r) => r.pooler) ? ', then the pooler lines' : ''),
  );
  console.log(`cells:      median of ${rounds.length} round(s)${rounds.length > 1 ? ' (min–max)' : ''}`);
  console.log('');
  printTable(['line', 'nestjs-job-queue', 'graphile-worker', 'ratio'], againstGraphile(config, rounds), ratio);
  console.log('');
  console.log('ratio > 1 means nestjs-job-queue is better: ours/theirs for jobs/s, theirs/ours for latency (ratio of the medians).');
  console.log(
    `"batched" rows: graphile-worker with localQueue.size ${config.localQueueSize}, completeJobBatchDelay 0, failJobBatchDelay 0, ` +
      'against the same nestjs-job-queue number (it has one mode).',
  );
  console.log(
    `add() one at a time: nestjs-job-queue's add(), graphile-worker's addJob() and add()'s insert from plain node-pg (plain SQL table below), ` +
      `measured interleaved in one phase of each round, each on its own database: ${describeSlices(sliceSizes(config.addOneJobs, config.addOneSlices))} per system, ` +
      'the order rotated each slice (ours, theirs, SQL; theirs, SQL, ours; …), each timed over its own slices only, after a few uncounted adds; ' +
      'so that the disk\'s fsync time, which drifts between phases, weighs on all four alike. ' +
      `addMany(): the two queues' calls of ${config.chunkSize} jobs in the same phase, taking turns call by call.`,
  );
  console.log('');
  printTable(['line', 'nestjs-job-queue', 'plain SQL', 'ours / SQL'], againstPlainSql(config, rounds), percent);
  console.log('');
  console.log(
    'plain SQL: the library\'s own statements on our schema from plain node-pg clients, no Nest, no TypeORM, no worker: ' +
      `add()'s insert statement one round trip at a time (its NOTIFY in its transaction), and the message add() sends (the insert, its commit, its NOTIFY after the commit in a transaction of its own), both interleaved with add(), see above; ${config.sqlClients} clients each looping claimJobs (FOR UPDATE SKIP LOCKED, ` +
      `${config.sqlBatchSize} per claim) then releaseJobs (moves them to finished_jobs as completed, as the default retention does). ` +
      '"ours / SQL": how close we come to that limit. Latency, one job at a time from before the add to the claim\'s rows back, as the lines above take theirs: ' +
      "our statements: add()'s insert with its NOTIFY naming the job in one autocommitted statement, heard by a listening client, then the claim of that job by id; " +
      'the least SQL: a two-column insert whose NOTIFY carries the id, then an update of that row by id on the listening connection (its commit not waiting for the disk), ' +
      'what any queue on PostgreSQL must wait for a job added in another process: its last line is that floor over graphile-worker\'s p50 (issue 30 asks ours for 60 %).',
  );
  console.log('');
  printLifecycle(config, rounds);
  console.log('');
  printFlows(rounds.map((r) => r.flows));
  const scale = rounds.flatMap((r) => (r.scale ? [r.scale] : []));
  if (scale.length > 0) {
    console.log('');
    printScale(config, scale);
  }
  const pooler = rounds.flatMap((r) => (r.pooler ? [r.pooler] : []));
  console.log('');
  if (pooler.length > 0) printPooler(config, pooler);
  else console.log(`pooler lines: skipped (${config.pooler ? 'PgBouncer is not installed' : 'POOLER=0'})`);
}

/**
 * Our drain with the default retention (line 1, measured again the same way as the others), with retention
 * { completed: 0 } (line 2) and with HISTORY completed jobs kept (line 3), then the ratios
 * the job lifecycle is held to: 1 / 2 (what keeping completed jobs costs) and 3 / 1 (what a
 * big history costs). Unlike the tables above, a ratio is taken per round, of that round's
 * drains (run one after the other), and then its median over the rounds.
 */
function printLifecycle(config: BenchConfig, rounds: RoundResult[]): void {
  const history = config.history.toLocaleString('en-US');
  const drains: Array<[string, number[]]> = [
    ['1. default retention (completed jobs kept 24 h in finished_jobs)', values(rounds, (r) => r.ours.lifecycle?.defaultPerSecond)],
    ['2. retention { completed: 0 } (completed jobs deleted at release)', values(rounds, (r) => r.ours.lifecycle?.withoutHistoryPerSecond)],
    ['4. default retention, one subscriber hearing every queue event', values(rounds, (r) => r.ours.lifecycle?.withListenerPerSecond)],
  ];
  if (config.history > 0) {
    drains.push([`3. default retention, ${history} completed jobs already kept`, values(rounds, (r) => r.ours.lifecycle?.withHistoryPerSecond)]);
  }
  printGrid(
    [`nestjs-job-queue drain, ${config.jobs} jobs, concurrency ${config.concurrency}`, 'jobs/s'],
    drains.map(([line, samples]) => [line, cell(samples, 'throughput')]),
  );
  console.log('');

  const ratios: Array<[string, number[], string]> = [
    [
      '1 / 2: completed jobs kept, against deleted at release',
      perRound(rounds, (r) => r.ours.lifecycle?.defaultPerSecond, (r) => r.ours.lifecycle?.withoutHistoryPerSecond),
      '>= 80 %',
    ],
    [
      '4 / 1: every queue event published and heard, against none',
      perRound(rounds, (r) => r.ours.lifecycle?.withListenerPerSecond, (r) => r.ours.lifecycle?.defaultPerSecond),
      '>= 85 %',
    ],
  ];
  if (config.history > 0) {
    ratios.push([
      `3 / 1: ${history} completed jobs kept, against none yet`,
      perRound(rounds, (r) => r.ours.lifecycle?.withHistoryPerSecond, (r) => r.ours.lifecycle?.defaultPerSecond),
      '~100 %',
    ]);
  }
  printGrid(
    ['job lifecycle: drain against drain', 'ratio', 'gate'],
    ratios.map(([line, samples, gate]) => [line, cell(samples, 'percent'), gate]),
  );
  console.log('');
  console.log(
    'lifecycle drains, each after VACUUM of jobs and a CHECKPOINT, then JOBS jobs added: 1 with the default retention (completed jobs kept); ' +
      '2 in a second app on the same database with retention { completed: 0 }: the release deletes completed jobs, as before the job lifecycle; ' +
      (config.history > 0
        ? `3 with the default retention after ${history} completed jobs, finished over the last day, were put in finished_jobs in one statement (then VACUUM ANALYZE). `
        : '3 is skipped (HISTORY=0). ') +
      `Ratios: per round, of that round's drains; ${rounds.length > 1 ? 'median (min–max) of the rounds' : 'one round'}.`,
  );
}

function againstGraphile(config: BenchConfig, rounds: RoundResult[]): Row[] {
  const drain = (mode: WorkerMode, label: string): Row => ({
    line: `drain ${config.jobs} jobs, concurrency ${config.concurrency} (jobs/s)${label}`,
    ours: values(rounds, (r) => r.ours.drainPerSecond.default),
    other: values(rounds, (r) => r.theirs.drainPerSecond[mode]),
    kind: 'throughput',
  });
  const latency = (mode: WorkerMode, p: keyof Latency, label: string): Row => ({
    line: `latency add() → handler start, ${p} (ms)${label}`,
    ours: values(rounds, (r) => r.ours.latencyMs.default?.[p]),
    other: values(rounds, (r) => r.theirs.latencyMs[mode]?.[p]),
    kind: 'latency',
  });
  // Ours with localStart off (NOTIFY and a claim, as for a job added in another process) against graphile-worker's default.
  const claimed = (p: keyof Latency): Row => ({
    line: `latency add() → handler start, ${p} (ms), ours with localStart off`,
    ours: values(rounds, (r) => r.ours.claimedLatencyMs?.[p]),
    other: values(rounds, (r) => r.theirs.latencyMs.default?.[p]),
    kind: 'latency',
  });
  return [
    {
      line: `add() one at a time, ${config.addOneJobs} jobs (jobs/s)`,
      ours: values(rounds, (r) => r.adds.one.ours),
      other: values(rounds, (r) => r.adds.one.theirs),
      kind: 'throughput',
    },
    {
      line: `addMany() ${config.chunkSize} per call, ${config.jobs} jobs (jobs/s)`,
      ours: values(rounds, (r) => r.adds.many.ours),
      other: values(rounds, (r) => r.adds.many.theirs),
      kind: 'throughput',
    },
    drain('default', ''),
    drain('batched', ', graphile batched'),
    latency('default', 'p50', ''),
    latency('default', 'p99', ''),
    latency('batched', 'p50', ', graphile batched'),
    latency('batched', 'p99', ', graphile batched'),
    claimed('p50'),
    claimed('p99'),
  ];
}

function againstPlainSql(config: BenchConfig, rounds: RoundResult[]): Row[] {
  return [
    {
      line: `add() vs its insert's round trips, one at a time, ${config.addOneJobs} jobs (jobs/s)`,
      ours: values(rounds, (r) => r.adds.one.ours),
      other: values(rounds, (r) => r.adds.one.raw),
      kind: 'throughput',
    },
    {
      line: `add() vs its own message (insert, commit, NOTIFY after), one at a time, ${config.addOneJobs} jobs (jobs/s)`,
      ours: values(rounds, (r) => r.adds.one.ours),
      other: values(rounds, (r) => r.adds.one.message),
      kind: 'throughput',
    },
    {
      line: `drain vs SQL limit (${config.sqlClients} clients claim + complete), ${config.jobs} jobs (jobs/s)`,
      ours: values(rounds, (r) => r.ours.drainPerSecond.default),
      other: values(rounds, (r) => r.sqlLimit.drainPerSecond),
      kind: 'throughput',
    },
    {
      line: 'latency add() → start, p50 (ms), a job added in another process: ours with localStart off vs our statements alone',
      ours: values(rounds, (r) => r.ours.claimedLatencyMs?.p50),
      other: values(rounds, (r) => r.sqlLimit.latency.ourStatements.p50),
      kind: 'latency',
    },
    {
      line: 'the same, the least SQL (insert + NOTIFY, update by id) vs graphile-worker',
      ours: values(rounds, (r) => r.sqlLimit.latency.least.p50),
      other: values(rounds, (r) => r.theirs.latencyMs.default?.p50),
      kind: 'latency',
    },
  ];
}

function printTable(header: string[], rows: Row[], compare: (row: Row) => string): void {
  printGrid(
    header,
    rows.map((row) => [row.line, cell(row.ours, row.kind), cell(row.other, row.kind), compare(row)]),
  );
}

/** Of the medians: ours/theirs for jobs/s, theirs/ours for latency. */
function ratio(row: Row): string {
  if (row.ours.length === 0 || row.other.length === 0) return '-';
  const [ours, theirs] = [medianOf(row.ours), medianOf(row.other)];
  return `${(row.kind === 'throughput' ? ours / theirs : theirs / ours).toFixed(2)}x`;
}

/** Ours as a percentage of the plain SQL, of the medians. */
function percent(row: Row): string {
  if (row.ours.length === 0 || row.other.length === 0) return '-';
  return `${Math.round((100 * medianOf(row.ours)) / medianOf(row.other))} %`;
}
