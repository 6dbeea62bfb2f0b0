import { cpus, totalmem } from 'node:os';
import type { BenchConfig } from './config';
import type { ServerSettings } from './database';
import type { SqlLimitResult } from './sql-limit';
import type { Latency, SuiteResult, WorkerMode } from './suite';

export interface Setting {
  server: string;
  settings: ServerSettings;
  graphileWorkerVersion: string;
}

/** Everything measured in one round. */
export interface RoundResult {
  ours: SuiteResult;
  theirs: SuiteResult;
  sqlLimit: SqlLimitResult;
}

/** One line of a table: a value per round for each side. */
interface Row {
  line: string;
  ours: number[];
  other: number[];
  kind: 'throughput' | 'latency';
}

/**
 * The machine and the server, then two tables of medians over the rounds with their min–max:
 * ours against graphile-worker (ratio of medians, > 1 means nestjs-job-queue is better), and
 * ours against the same statements in plain SQL (ours as a percentage of the plain SQL).
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
    `settings:   JOBS=${config.jobs} CONCURRENCY=${config.concurrency} LATENCY_SAMPLES=${config.latencySamples} ROUNDS=${config.rounds}, ` +
      `pollInterval ${config.pollInterval} ms, pool ${config.poolSize} connections, graphile-worker ${setting.graphileWorkerVersion}`,
  );
  console.log('rounds:     each round runs nestjs-job-queue, then graphile-worker (default, then batched), then plain SQL');
  console.log(`cells:      median of ${rounds.length} round(s)${rounds.length > 1 ? ' (min–max)' : ''}`);
  console.log('');
  printTable(['line', 'nestjs-job-queue', 'graphile-worker', 'ratio'], againstGraphile(config, rounds), ratio);
  console.log('');
  console.log('ratio > 1 means nestjs-job-queue is better: ours/theirs for jobs/s, theirs/ours for latency (ratio of the medians).');
  console.log(
    `"batched" rows: graphile-worker with localQueue.size ${config.localQueueSize}, completeJobBatchDelay 0, failJobBatchDelay 0, ` +
      'against the same nestjs-job-queue number (it has one mode).',
  );
  console.log('');
  printTable(['line', 'nestjs-job-queue', 'plain SQL', 'ours / SQL'], againstPlainSql(config, rounds), percent);
  console.log('');
  console.log(
    'plain SQL: the library\'s own statements on our schema from plain node-pg clients, no Nest, no TypeORM, no worker: ' +
      `add_job() one round trip at a time; ${config.sqlClients} clients each looping claimJobs (FOR UPDATE SKIP LOCKED, ` +
      `${config.sqlBatchSize} per claim) then releaseJobs (deletes them). "ours / SQL": how close we come to that limit.`,
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
  return [
    {
      line: `add() one at a time, ${config.addOneJobs} jobs (jobs/s)`,
      ours: values(rounds, (r) => r.ours.addOnePerSecond),
      other: values(rounds, (r) => r.theirs.addOnePerSecond),
      kind: 'throughput',
    },
    {
      line: `addMany() ${config.chunkSize} per call, ${config.jobs} jobs (jobs/s)`,
      ours: values(rounds, (r) => r.ours.addManyPerSecond),
      other: values(rounds, (r) => r.theirs.addManyPerSecond),
      kind: 'throughput',
    },
    drain('default', ''),
    drain('batched', ', graphile batched'),
    latency('default', 'p50', ''),
    latency('default', 'p99', ''),
    latency('batched', 'p50', ', graphile batched'),
    latency('batched', 'p99', ', graphile batched'),
  ];
}

function againstPlainSql(config: BenchConfig, rounds: RoundResult[]): Row[] {
  return [
    {
      line: `add() vs add_job() round trips, one at a time, ${config.addOneJobs} jobs (jobs/s)`,
      ours: values(rounds, (r) => r.ours.addOnePerSecond),
      other: values(rounds, (r) => r.sqlLimit.addOnePerSecond),
      kind: 'throughput',
    },
    {
      line: `drain vs SQL limit (${config.sqlClients} clients claim + complete), ${config.jobs} jobs (jobs/s)`,
      ours: values(rounds, (r) => r.ours.drainPerSecond.default),
      other: values(rounds, (r) => r.sqlLimit.drainPerSecond),
      kind: 'throughput',
    },
  ];
}

function values(rounds: RoundResult[], pick: (round: RoundResult) => number | undefined): number[] {
  return rounds.map(pick).filter((value): value is number => value !== undefined);
}

function printTable(header: string[], rows: Row[], compare: (row: Row) => string): void {
  const cells = rows.map((row) => [row.line, cell(row.ours, row.kind), cell(row.other, row.kind), compare(row)]);
  const widths = header.map((title, i) => Math.max(title.length, ...cells.map((c) => c[i].length)));
  const line = (values: string[]) => values.map((v, i) => (i === 0 ? v.padEnd(widths[i]) : v.padStart(widths[i]))).join(' | ');
  console.log(line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('-|-'));
  for (const c of cells) console.log(line(c));
}

/** The median, and the min–max when there was more than one round. */
function cell(samples: number[], kind: Row['kind']): string {
  if (samples.length === 0) return '-';
  const median = format(medianOf(samples), kind);
  if (samples.length === 1) return median;
  return `${median} (${format(Math.min(...samples), kind)}–${format(Math.max(...samples), kind)})`;
}

function medianOf(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

function format(value: number, kind: Row['kind']): string {
  if (kind === 'throughput') return Math.round(value).toLocaleString('en-US');
  return value.toFixed(value < 10 ? 2 : 1);
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
