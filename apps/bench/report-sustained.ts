import { cell, medianOf, printGrid, values } from './report-format';
import type { SustainedResult, SustainedStep } from './sustained';
import { SUSTAINED_SYSTEMS, type SustainedSystem } from './sustained-process';

const MIB = 1024 * 1024;

/**
 * The sustained lines: per system and step, medians (min–max) of the rounds; the highest rate
 * each system held and its ratio to graphile-worker batched's (per round, median of the
 * rounds, a system that held no step counting 0); then the last round's 10-second slices.
 */
export function printSustained(rounds: SustainedResult[]): void {
  const percents = [...new Set(rounds.flatMap((r) => r.systems.flatMap((s) => s.steps.map((step) => step.percent))))].sort((a, b) => a - b);
  const stepOf = (r: SustainedResult, system: SustainedSystem, percent: number) => r.systems.find((s) => s.system === system)?.steps.find((step) => step.percent === percent);
  const rows: string[][] = [];
  for (const system of SUSTAINED_SYSTEMS) {
    for (const percent of percents) {
      const steps = rounds.map((r) => stepOf(r, system, percent)).filter((s): s is SustainedStep => s !== undefined);
      if (steps.length === 0) continue;
      const held = steps.filter((s) => !s.failed).length;
      rows.push([
        `${system}, ${percent} %`,
        cell(values(steps, (s) => s.offeredPerSecond), 'throughput'),
        cell(values(steps, (s) => s.addedPerSecond), 'throughput'),
        cell(values(steps, (s) => s.waits?.p50), 'latency'),
        cell(values(steps, (s) => s.waits?.p99), 'latency'),
        cell(values(steps, (s) => s.waits?.p999), 'latency'),
        cell(values(steps, (s) => s.adds?.p99), 'latency'),
        cell(values(steps, (s) => lastOverFirst(s)), 'latency'),
        cell(values(steps, (s) => growth(s, 'jobs')), 'latency'),
        `${held} of ${steps.length}${steps.find((s) => s.failed)?.failed ? `: ${steps.find((s) => s.failed)!.failed}` : ''}`,
      ]);
    }
  }
  printGrid(['sustained: system, offered % of our capacity', 'offered jobs/s', 'added jobs/s', 'p50 ms', 'p99 ms', 'p99.9 ms', "the add()'s own p99 ms", 'last/first slice p99', 'jobs table+indexes ×', 'held'], rows);
  console.log('');
  const highest = (r: SustainedResult, system: SustainedSystem) => {
    const held = r.systems.find((s) => s.system === system)?.steps.filter((s) => !s.failed) ?? [];
    return held.length === 0 ? 0 : Math.max(...held.map((s) => s.offeredPerSecond));
  };
  const ratios = rounds.map((r) => highest(r, 'nestjs-job-queue') / highest(r, 'graphile-worker batched')).filter(Number.isFinite);
  printGrid(
    ['sustained: highest rate held (jobs/s)', ...SUSTAINED_SYSTEMS, 'ours / graphile-worker batched'],
    [['', ...SUSTAINED_SYSTEMS.map((system) => cell(values(rounds, (r) => highest(r, system)), 'throughput')), ratios.length ? `${medianOf(ratios).toFixed(2)}×` : '-']],
  );
  console.log('');
  printSlices(rounds[rounds.length - 1]);
  console.log('');
  console.log(
    `sustained: 2 producer processes add one add() at a time at the offered rate, 2 worker processes (concurrency as the bench's) run the jobs, on the default ` +
      `retention. The offered rates are percentages of our capacity: the jobs started a second while our 2 producers added flat out (${rate(rounds, (r) => r.capacityPerSecond)} jobs/s, ` +
      `median of the rounds; our 2 worker processes drained ${rate(rounds, (r) => r.drainPerSecond)} jobs/s of a queued table). Waits: from the add() call to the handler's start, ` +
      'every job. A step holds when at its end at most a second of jobs waits, its p99 is under 100 ms and the producers kept to the schedule; after one that does not, ' +
      'the system\'s later steps are skipped. "the add()\'s own p99": the producers\' add() calls from the call to the answer, every job: a job cannot start before its add commits, ' +
        'so this is a floor under the waits\' p99 that no worker can lower. "jobs table+indexes ×": its size at the step\'s last slice over its first.',
  );
}

const rate = (rounds: SustainedResult[], pick: (r: SustainedResult) => number) => Math.round(medianOf(rounds.map(pick))).toLocaleString('en-US');

function lastOverFirst(step: SustainedStep): number | undefined {
  const slices = step.slices.filter((s) => s.waits);
  if (slices.length < 2) return undefined;
  return slices[slices.length - 1].waits!.p99 / slices[0].waits!.p99;
}

function growth(step: SustainedStep, table: string): number | undefined {
  const size = (i: number) => (step.slices[i]?.tables[table] ? step.slices[i].tables[table].heapBytes + step.slices[i].tables[table].indexBytes : undefined);
  const [first, last] = [size(0), size(step.slices.length - 1)];
  return first && last ? last / first : undefined;
}

function printSlices(round: SustainedResult): void {
  const rows: string[][] = [];
  for (const { system, steps } of round.systems) {
    for (const step of steps) {
      for (const slice of step.slices) {
        const jobs = slice.tables.jobs;
        const finished = slice.tables.finished_jobs;
        rows.push([
          `${system}, ${step.percent} %, ${slice.startS}–${slice.endS} s`,
          Math.round(slice.startedPerSecond).toLocaleString('en-US'),
          slice.waits ? slice.waits.p50.toFixed(2) : '-',
          slice.waits ? slice.waits.p99.toFixed(2) : '-',
          slice.waits ? slice.waits.p999.toFixed(2) : '-',
          jobs ? `${(jobs.heapBytes / MIB).toFixed(1)} + ${(jobs.indexBytes / MIB).toFixed(1)}` : '-',
          jobs ? jobs.deadRows.toLocaleString('en-US') : '-',
          finished ? `${((finished.heapBytes + finished.indexBytes) / MIB).toFixed(1)}` : '-',
          `${slice.nodeCpuPercent.toFixed(0)} + ${slice.postgresCpuPercent.toFixed(0)}`,
        ]);
      }
    }
  }
  printGrid(['sustained, last round, by 10-s slice', 'started/s', 'p50 ms', 'p99 ms', 'p99.9 ms', 'jobs MiB (heap + indexes)', 'jobs dead rows', 'finished_jobs MiB', 'CPU % Node + PostgreSQL'], rows);
}
