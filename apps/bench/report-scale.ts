import type { BenchConfig } from './config';
import { UNWRITTEN_LIMIT, type ProcessDrain } from './process-drain';
import { LIMITED_CONCURRENCY, RATE_MAX, rateJobs } from './limits';
import { cell, medianOf, perRound, printGrid, values } from './report-format';
import type { BacklogResult, ScaleResult } from './scale';
import type { MemorySample } from './worker-process';

const MIB = 2 ** 20;

/**
 * The scale lines (scale.ts): JOBS drained by 1 … PROCESSES worker processes, with each
 * count against one process; then, with SCALE=1, the BACKLOG drain against the JOBS drain of
 * the same process, and that process's memory after each. Ratios are per round, of that
 * round's drains, then their median (min–max) over the rounds, as for the lifecycle drains.
 */
export function printScale(config: BenchConfig, rounds: ScaleResult[]): void {
  if (config.processes > 0) printProcesses(config, rounds);
  if (rounds.some((r) => r.limits)) printLimits(config, rounds);
  if (config.scale) printBacklog(config, rounds);
}

/** The limits' lines (limits.ts) and their gates (issue 27): ≥ 70 % of one unlimited process, the rate never exceeded and used to ≥ 95 %. */
function printLimits(config: BenchConfig, rounds: ScaleResult[]): void {
  const gate = (samples: number[], ok: (median: number) => boolean, text: string) => (samples.length === 0 ? '-' : `${ok(medianOf(samples)) ? 'ok' : 'FAIL'} (${text})`);
  const against = perRound(rounds, (r) => r.limits?.concurrency.perSecond, (r) => r.processes[0]?.perSecond);
  const most = values(rounds, (r) => r.limits?.rate.mostInWindow);
  const used = values(rounds, (r) => r.limits?.rate.usedPercent);
  printGrid(
    ['limits (nestjs-job-queue, 3 worker processes)', 'value', 'gate'],
    [
      [`globalConcurrency ${LIMITED_CONCURRENCY}, ${config.jobs} jobs, to the last handler start (jobs/s)`, cell(values(rounds, (r) => r.limits?.concurrency.perSecond), 'throughput'), ''],
      ['  against 1 unlimited process (the first worker-process line)', cell(against, 'percent'), gate(against, (m) => m >= 70, '>= 70 %')],
      [`rate limit ${RATE_MAX}/s, ${rateJobs(config)} jobs: most starts in any second`, cell(most, 'throughput'), gate(most, () => Math.max(...most) <= RATE_MAX, `<= ${RATE_MAX} in every round`)],
      ['  share of the rate used', cell(used, 'percent'), gate(used, (m) => m >= 95, '>= 95 %')],
    ],
  );
  console.log('');
  console.log(
    `limits: the bench's task limited by setTaskLimits on the scale lines' database, the processes at concurrency ${config.concurrency} each; ` +
      'the concurrency line timed as the worker-process lines; the rate line by the jobs\' started_at: the most in any closed second, and ' +
      `(jobs / ${RATE_MAX} − 1) seconds, what the rate allows after the first start, against the first to the last start.`,
  );
  console.log('');
}

function printProcesses(config: BenchConfig, rounds: ScaleResult[]): void {
  const rows = Array.from({ length: config.processes }, (_, i) => {
    const timed = (pick: (d: ProcessDrain) => number | undefined) => [
      cell(values(rounds, (r) => pick(r.processes[i])), 'throughput'),
      cell(perRound(rounds, (r) => pick(r.processes[i]), (r) => pick(r.processes[0])), 'percent'),
    ];
    return [`${i + 1} process${i === 0 ? '' : 'es'}`, ...timed((d) => d.perSecond), ...timed((d) => d.emptiedPerSecond)];
  });
  printGrid(
    [
      `nestjs-job-queue worker processes, ${config.jobs} jobs, concurrency ${config.concurrency} each (jobs/s)`,
      'to the last handler start',
      'against 1 process',
      'to an empty jobs table',
      'against 1 process',
    ],
    rows,
  );
  console.log('');
  console.log(
    `worker processes: each a child process with a Nest application context of its own (pool of ${config.poolSize} connections), on one database; ` +
      'each line after VACUUM of jobs and a CHECKPOINT, the jobs added by addMany(), then the "go" to every process at once, ' +
      'timed from the go to the last handler start any process reported (so comparable with the lifecycle drains, not with the drain line above), ' +
      'and to the first count of the jobs table that found it empty (every completion written; polled every 20 ms). ' +
      `Before the first line every process ran a share of a warm-up. The processes share the machine's CPUs with PostgreSQL.`,
  );
  console.log('');
}

function printBacklog(config: BenchConfig, rounds: ScaleResult[]): void {
  const [jobs, backlog] = [config.jobs.toLocaleString('en-US'), config.backlog.toLocaleString('en-US')];
  type Pick = (b: BacklogResult) => number | undefined;
  const over = (pick: Pick) => (r: ScaleResult) => (r.backlog ? pick(r.backlog) : undefined);
  const drainRow = (label: string, drain: (b: BacklogResult) => ProcessDrain | undefined) => [
    label,
    cell(values(rounds, over((b) => drain(b)?.perSecond)), 'throughput'),
    cell(values(rounds, over((b) => drain(b)?.emptiedPerSecond)), 'throughput'),
  ];
  printGrid(
    [`nestjs-job-queue backlog, 1 worker process, concurrency ${config.concurrency} (jobs/s)`, 'to the last handler start', 'to an empty jobs table'],
    [drainRow(`drain ${jobs} jobs`, (b) => b.jobs), drainRow(`drain a backlog of ${backlog} jobs`, (b) => b.backlog)],
  );
  for (const [i, r] of rounds.entries()) {
    for (const [label, drain] of [[jobs, r.backlog?.jobs], [backlog, r.backlog?.backlog]] as const) {
      if (drain?.stalled) console.log(`round ${i + 1}, the ${label}-job drain stalled: ${drain.stalled}`);
    }
  }
  console.log('');
  const ratio = (pick: (d: ProcessDrain) => number | undefined) =>
    cell(perRound(rounds, over((b) => b.backlog && pick(b.backlog)), over((b) => pick(b.jobs))), 'percent');
  printGrid(
    ['backlog: drain against drain', 'to the last handler start', 'to an empty jobs table', 'gate'],
    [[`${backlog}-job backlog against ${jobs} jobs`, ratio((d) => d.perSecond), ratio((d) => d.emptiedPerSecond), '>= 90 %']],
  );
  console.log('');
  const inMiB = (pick: Pick) => cell(values(rounds, over((b) => mebibytes(pick(b)))), 'mebibytes');
  const change = (field: keyof MemorySample): Pick => (b) => (b.memoryAfterBacklog ? b.memoryAfterBacklog[field] - b.memoryAfterJobs[field] : undefined);
  printGrid(
    ['worker process memory, after a full GC (MiB)', 'RSS', 'heap used', 'gate'],
    [
      [`after the ${jobs}-job drain`, inMiB((b) => b.memoryAfterJobs.rss), inMiB((b) => b.memoryAfterJobs.heapUsed), ''],
      [`after the ${backlog}-job drain`, inMiB((b) => b.memoryAfterBacklog?.rss), inMiB((b) => b.memoryAfterBacklog?.heapUsed), ''],
      ['change', inMiB(change('rss')), inMiB(change('heapUsed')), 'flat'],
    ],
  );
  console.log('');
  console.log(
    'backlog: both drains by the first worker process, after its warm-up (and the lines above), each after its jobs were put in jobs by one insert … select ' +
      'from generate_series, then VACUUM ANALYZE and a CHECKPOINT; timed from the go to the last handler start, and to the first count of the jobs table ' +
      'that found it empty (every completion written; polled every 20 ms). A drain is given up once its worker holds more than ' +
      `${UNWRITTEN_LIMIT.toLocaleString('en-US')} completions unwritten, or if its table is not empty a minute after every handler started. ` +
      'Memory: process.memoryUsage() in that process after the drain, after gc(). ' +
      `Ratio and change: per round, of that round's drains; ${rounds.length > 1 ? 'median (min–max) of the rounds' : 'one round'}.`,
  );
}

function mebibytes(bytes: number | undefined): number | undefined {
  return bytes === undefined ? undefined : bytes / MIB;
}
