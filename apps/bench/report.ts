import { cpus, totalmem } from 'node:os';
import type { BenchConfig } from './config';
import type { Latency, SuiteResult, WorkerMode } from './suite';

export interface Setting {
  database: string;
  postgres: string;
  graphileWorkerVersion: string;
}

interface Row {
  line: string;
  ours: number;
  theirs: number;
  kind: 'throughput' | 'latency';
}

/** The machine, the settings, then one row per line: ratios read "> 1 means nestjs-job-queue is better". */
export function printReport(config: BenchConfig, setting: Setting, ours: SuiteResult, theirs: SuiteResult): void {
  const cpu = cpus();
  console.log('');
  console.log(`machine:    ${cpu[0]?.model ?? 'unknown CPU'}, ${cpu.length} CPUs, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, Node ${process.version}`);
  console.log(`postgres:   ${setting.postgres}`);
  console.log(`database:   ${setting.database}; a fresh database per system`);
  console.log(
    `settings:   JOBS=${config.jobs} CONCURRENCY=${config.concurrency} LATENCY_SAMPLES=${config.latencySamples}, ` +
      `pollInterval ${config.pollInterval} ms, pool ${config.poolSize} connections, graphile-worker ${setting.graphileWorkerVersion}`,
  );
  console.log('');
  printTable(rows(config, ours, theirs));
  console.log('');
  console.log('ratio > 1 means nestjs-job-queue is better: ours/theirs for jobs/s, theirs/ours for latency.');
  console.log(
    `"batched" rows: graphile-worker with localQueue.size ${config.localQueueSize}, completeJobBatchDelay 0, failJobBatchDelay 0, ` +
      'against the same nestjs-job-queue number (it has one mode).',
  );
}

function rows(config: BenchConfig, ours: SuiteResult, theirs: SuiteResult): Row[] {
  const latencyRows = (mode: WorkerMode, label: string): Row[] => {
    const theirLatency = theirs.latencyMs[mode];
    const ourLatency = ours.latencyMs.default;
    if (!theirLatency || !ourLatency) return [];
    return (['p50', 'p99'] as Array<keyof Latency>).map((p) => ({
      line: `latency add() → handler start, ${p} (ms)${label}`,
      ours: ourLatency[p],
      theirs: theirLatency[p],
      kind: 'latency',
    }));
  };
  const drainRow = (mode: WorkerMode, label: string): Row[] => {
    const theirDrain = theirs.drainPerSecond[mode];
    const ourDrain = ours.drainPerSecond.default;
    if (theirDrain === undefined || ourDrain === undefined) return [];
    return [{ line: `drain ${config.jobs} jobs, concurrency ${config.concurrency} (jobs/s)${label}`, ours: ourDrain, theirs: theirDrain, kind: 'throughput' }];
  };
  return [
    { line: `add() one at a time, ${config.addOneJobs} jobs (jobs/s)`, ours: ours.addOnePerSecond, theirs: theirs.addOnePerSecond, kind: 'throughput' },
    { line: `addMany() ${config.chunkSize} per call, ${config.jobs} jobs (jobs/s)`, ours: ours.addManyPerSecond, theirs: theirs.addManyPerSecond, kind: 'throughput' },
    ...drainRow('default', ''),
    ...drainRow('batched', ', graphile batched'),
    ...latencyRows('default', ''),
    ...latencyRows('batched', ', graphile batched'),
  ];
}

function printTable(rows: Row[]): void {
  const header = ['line', 'nestjs-job-queue', 'graphile-worker', 'ratio'];
  const cells = rows.map((row) => [row.line, format(row.ours, row.kind), format(row.theirs, row.kind), ratio(row)]);
  const widths = header.map((title, i) => Math.max(title.length, ...cells.map((c) => c[i].length)));
  const line = (values: string[]) => values.map((v, i) => (i === 0 ? v.padEnd(widths[i]) : v.padStart(widths[i]))).join(' | ');
  console.log(line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('-|-'));
  for (const c of cells) console.log(line(c));
}

function format(value: number, kind: Row['kind']): string {
  if (kind === 'throughput') return Math.round(value).toLocaleString('en-US');
  return value.toFixed(value < 10 ? 2 : 1);
}

function ratio(row: Row): string {
  const value = row.kind === 'throughput' ? row.ours / row.theirs : row.theirs / row.ours;
  return `${value.toFixed(2)}x`;
}
