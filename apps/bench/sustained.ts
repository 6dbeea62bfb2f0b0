/**
 * The sustained lines (issue 30): production's load rather than a drain of a full table. Two
 * producer processes add jobs one add() at a time at a fixed offered rate, two worker
 * processes run them, on the default retention, and every job's wait from its add to its
 * handler's start is recorded. The rate steps through SUSTAINED_STEPS percent of our measured
 * drain rate (two worker processes draining JOBS jobs, in the same run), each step for
 * SUSTAINED_S seconds without a pause, cut into 10-second slices: waits at p50, p99 and p99.9,
 * jobs started a second, the tables' size and dead rows, and the CPU of Node and PostgreSQL.
 * The same offered rates go to graphile-worker as it ships and batched, each on a fresh
 * database of its own. A step holds when, at its end, the jobs added but not started are at
 * most one second's worth, its p99 is under 100 ms, and the producers kept to the schedule;
 * a system's later steps are skipped after one that did not.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'pg';
import type { BenchConfig } from './config';
import { recreateDatabase } from './database';
import { insertJobs, notifyWorkers, type Queryable } from './jobs-table';
import type { Progress } from './suite';
import { SustainedProcess } from './sustained-handle';
import { SUSTAINED_SYSTEMS, type SustainedSystem } from './sustained-process';
import { postgresCpuMs, readTableSizes, waitsOf, type TableSize, type Waits } from './sustained-stats';
import { openGraphileWorker } from './system-graphile-worker';
import { openApp } from './system-nestjs-job-queue';

export interface SustainedSlice {
  /** Seconds from the step's start to the slice's end. */
  endS: number;
  waits?: Waits;
  startedPerSecond: number;
  tables: Record<string, TableSize>;
  /** CPU over the slice, in % of one core: the four bench processes together, and every PostgreSQL process. */
  nodeCpuPercent: number;
  postgresCpuPercent: number;
}

export interface SustainedStep {
  percent: number;
  offeredPerSecond: number;
  addedPerSecond: number;
  /** How far behind their schedule the producers' last adds were (ms). */
  producersBehindMs: number;
  waits?: Waits;
  /** Jobs added and not yet started when the step ended. */
  backlog: number;
  /** Why the step did not hold; absent if it held. */
  failed?: string;
  slices: SustainedSlice[];
}

export interface SustainedSystemResult {
  system: SustainedSystem;
  /** The steps run (those after one that failed are not). */
  steps: SustainedStep[];
}

export interface SustainedResult {
  /** Our drain rate with two worker processes, the base of the offered rates (jobs/s). */
  referencePerSecond: number;
  systems: SustainedSystemResult[];
}

const PROCESSES = 2;
const SLICE_S = 10;
const MAX_P99_MS = 100;
/** Jobs the reference drain's processes run first, so that it does not time a cold start. */
const WARM_UP_JOBS = 2_000;
/** Seconds of load before a system's first step, uncounted. */
const WARM_UP_S = 10;

const TABLES: Record<SustainedSystem, Record<string, string>> = {
  'nestjs-job-queue': { jobs: 'job_queue.jobs', finished_jobs: 'job_queue.finished_jobs' },
  'graphile-worker': { jobs: 'graphile_worker._private_jobs' },
  'graphile-worker batched': { jobs: 'graphile_worker._private_jobs' },
};

/** The sustained lines of one round, each system on `database` made afresh on `serverUrl`'s server. */
export async function runSustained(
  serverUrl: string,
  database: string,
  config: BenchConfig,
  step: Progress,
  only: readonly SustainedSystem[] = SUSTAINED_SYSTEMS,
): Promise<SustainedResult> {
  let referencePerSecond = 0;
  const systems: SustainedSystemResult[] = [];
  // ours first: its drain is the base of every system's offered rates
  for (const system of SUSTAINED_SYSTEMS.filter((s) => s === 'nestjs-job-queue' || only.includes(s))) {
    const url = await recreateDatabase(serverUrl, database);
    const result = await onSystem(url, system, config, step, async (bench, workers) => {
      if (system !== 'nestjs-job-queue') return referencePerSecond;
      step(`sustained: our drain with ${PROCESSES} worker processes, the base of the offered rates`);
      await drainOf(bench, workers, WARM_UP_JOBS);
      referencePerSecond = await drainOf(bench, workers, config.jobs);
      return referencePerSecond;
    });
    systems.push(result);
  }
  return { referencePerSecond, systems };
}

type Counted = { started: number; added: number; cpuMicros: number };

/** Every step for one system: its schema made by a bench connection of its own, then the producers and workers forked. */
async function onSystem(
  url: string,
  system: SustainedSystem,
  config: BenchConfig,
  step: Progress,
  reference: (bench: Queryable, workers: SustainedProcess[]) => Promise<number>,
): Promise<SustainedSystemResult> {
  const opened = system === 'nestjs-job-queue' ? await openApp(url, config) : await openGraphileWorker(url, config);
  const bench = system === 'nestjs-job-queue' ? (opened as Awaited<ReturnType<typeof openApp>>).dataSource : graphileQueryable(url);
  const samples: number[] = [];
  const processes: SustainedProcess[] = [];
  try {
    const open = (role: 'producer' | 'worker', i: number) =>
      SustainedProcess.open(url, config, system, role, `${system} ${role} ${i + 1}`, (more) => {
        for (const value of more) samples.push(value);
      });
    const workers = await Promise.all(Array.from({ length: PROCESSES }, (_, i) => open('worker', i)));
    processes.push(...workers);
    const producers = await Promise.all(Array.from({ length: PROCESSES }, (_, i) => open('producer', i)));
    processes.push(...producers);
    const base = await reference(bench, workers);
    const counts = async (): Promise<Counted> => {
      const all = await Promise.all(processes.map((p) => p.counts()));
      return all.reduce((sum, c) => ({ started: sum.started + c.started, added: sum.added + c.added, cpuMicros: sum.cpuMicros + c.cpuMicros }), { started: 0, added: 0, cpuMicros: 0 });
    };
    step(`sustained: ${system}, warm-up: ${WARM_UP_S} s at the first step's rate`);
    let nextIndex = await warmUp(producers, counts, (base * config.sustainedSteps[0]) / 100);
    const steps: SustainedStep[] = [];
    let startedBefore = (await counts()).started;
    for (const percent of config.sustainedSteps) {
      step(`sustained: ${system}, ${percent} % of ${Math.round(base)} jobs/s for ${config.sustainedSeconds} s`);
      samples.length = 0;
      const result = await runStep(bench, system, producers, counts, samples, percent, base, config.sustainedSeconds, nextIndex, startedBefore);
      nextIndex += result.added;
      startedBefore = result.startedAtEnd;
      steps.push(result.step);
      if (result.step.failed) break;
    }
    return { system, steps };
  } finally {
    await Promise.all(processes.map((p) => p.close()));
    if (system !== 'nestjs-job-queue') await (bench as ReturnType<typeof graphileQueryable>).end();
    await opened.close();
  }
}

async function runStep(
  bench: Queryable,
  system: SustainedSystem,
  producers: SustainedProcess[],
  counts: () => Promise<Counted>,
  samples: number[],
  percent: number,
  base: number,
  seconds: number,
  firstIndex: number,
  startedBefore: number,
): Promise<{ step: SustainedStep; added: number; startedAtEnd: number }> {
  const offered = (base * percent) / 100;
  const share = Math.round(offered * seconds) / producers.length;
  const go = performance.timeOrigin + performance.now();
  const producing = Promise.all(producers.map((p, i) => p.produce(offered / producers.length, seconds, firstIndex + Math.ceil(share) * i)));
  const slices: Array<Omit<SustainedSlice, 'waits'>> = [];
  let before = { counted: await counts(), postgresMs: postgresCpuMs(), at: go };
  for (let end = SLICE_S; end < seconds + SLICE_S; end += SLICE_S) {
    const endAt = go + Math.min(end, seconds) * 1000;
    await sleep(Math.max(0, endAt - (performance.timeOrigin + performance.now())));
    const now = { counted: await counts(), postgresMs: postgresCpuMs(), at: performance.timeOrigin + performance.now() };
    const elapsedMs = now.at - before.at;
    slices.push({
      endS: Math.min(end, seconds),
      startedPerSecond: ((now.counted.started - before.counted.started) * 1000) / elapsedMs,
      tables: await readTableSizes(bench, TABLES[system]),
      nodeCpuPercent: ((now.counted.cpuMicros - before.counted.cpuMicros) / 1000 / elapsedMs) * 100,
      postgresCpuPercent: ((now.postgresMs - before.postgresMs) / elapsedMs) * 100,
    });
    before = now;
  }
  const produced = await producing;
  const end = await counts();
  const added = produced.reduce((sum, p) => sum + p.added, 0);
  const backlog = startedBefore + added - end.started;
  const inStep: number[] = [];
  const bySlice: number[][] = slices.map(() => []);
  for (let i = 0; i < samples.length; i += 2) {
    const sinceGo = (samples[i] - go) / 1000;
    if (sinceGo < 0 || sinceGo >= seconds) continue;
    inStep.push(samples[i + 1]);
    bySlice[Math.min(slices.length - 1, Math.floor(sinceGo / SLICE_S))].push(samples[i + 1]);
  }
  const waits = waitsOf(inStep);
  const behind = Math.max(...produced.map((p) => p.behindMs));
  const failed =
    backlog > Math.max(100, offered)
      ? `${backlog.toLocaleString('en-US')} jobs waiting at the end (more than a second's worth)`
      : waits && waits.p99 >= MAX_P99_MS
        ? `p99 ${waits.p99.toFixed(0)} ms`
        : behind > 1000
          ? `the producers fell ${(behind / 1000).toFixed(1)} s behind`
          : undefined;
  return {
    step: {
      percent,
      offeredPerSecond: offered,
      addedPerSecond: added / seconds,
      producersBehindMs: behind,
      waits,
      backlog,
      failed,
      slices: slices.map((slice, i) => ({ ...slice, waits: waitsOf(bySlice[i]) })),
    },
    added,
    startedAtEnd: end.started,
  };
}

/**
 * The producers at `rate` for WARM_UP_S, uncounted, then until every job added has started:
 * each process's connections opened and its statements planned before the first step, as in
 * an app that has been up a while. Returns the jobs added (the next payload index).
 */
async function warmUp(producers: SustainedProcess[], counts: () => Promise<Counted>, rate: number): Promise<number> {
  const before = await counts();
  const share = Math.ceil(rate * WARM_UP_S);
  const produced = await Promise.all(producers.map((p, i) => p.produce(rate / producers.length, WARM_UP_S, share * i)));
  const deadline = Date.now() + 60_000;
  for (;;) {
    const now = await counts();
    const [started, added] = [now.started - before.started, now.added - before.added];
    if (started >= added) break;
    if (Date.now() > deadline) throw new Error(`the warm-up's jobs did not all start within a minute: ${started} of ${added}`);
    await sleep(50);
  }
  return share * produced.length;
}

/** `count` jobs without a timestamp inserted at once, timed from the "go" to their last start as the workers count them: jobs/s. */
async function drainOf(bench: Queryable, workers: SustainedProcess[], count: number): Promise<number> {
  const startedBefore = (await Promise.all(workers.map((w) => w.counts()))).reduce((sum, c) => sum + c.started, 0);
  await insertJobs(bench, count);
  const go = performance.now();
  await notifyWorkers(bench);
  for (;;) {
    const started = (await Promise.all(workers.map((w) => w.counts()))).reduce((sum, c) => sum + c.started, 0);
    if (started - startedBefore >= count) return (count * 1000) / (performance.now() - go);
    await sleep(10);
  }
}

/** A plain pg pool of one connection to read graphile-worker's table with. */
function graphileQueryable(url: string) {
  const pool = new Pool({ connectionString: url, max: 1 });
  return { query: async (text: string, values?: unknown[]) => (await pool.query(text, values)).rows, end: () => pool.end() };
}
