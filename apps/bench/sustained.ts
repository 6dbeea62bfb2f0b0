/**
 * The sustained lines (issue 30): production's load rather than a drain of a full table. Two
 * producer processes add jobs one add() at a time at a fixed offered rate, two worker
 * processes run them, on the default retention, and every job's wait from its add to its
 * handler's start is recorded. The rates are SUSTAINED_STEPS percent of our capacity: the jobs
 * started a second while our two producers add flat out, measured in the same run (a job added
 * alone costs a transaction of its own, and on a small machine that, not the workers, is the
 * limit: our two worker processes drain a queued table at many times that rate, measured too).
 * Each step lasts SUSTAINED_S seconds, without a pause between, cut into 10-second slices:
 * waits at p50, p99 and p99.9, jobs started a second, the tables' size and dead rows, and the
 * CPU of Node and PostgreSQL. The same offered rates go to graphile-worker as it ships and
 * batched, each system on a fresh database of its own, after a warm-up. A step holds when, at
 * its end, the jobs added but not started are at most one second's worth, its p99 is under
 * 100 ms, and the producers kept to the schedule; a system's later steps are skipped after one
 * that did not.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'pg';
import type { BenchConfig } from './config';
import { recreateDatabase } from './database';
import { insertJobs, notifyWorkers, type Queryable } from './jobs-table';
import { drainTimeoutMs, type Progress } from './suite';
import { SustainedProcess } from './sustained-handle';
import { SUSTAINED_SYSTEMS, type SustainedSystem } from './sustained-process';
import { postgresCpuMs, readTableSizes, waitsOf, type TableSize, type Waits } from './sustained-stats';
import { openGraphileWorker } from './system-graphile-worker';
import { openApp } from './system-nestjs-job-queue';

export interface SustainedSlice {
  /** Seconds from the step's start to the slice's start and end. */
  startS: number;
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
  /**
   * The producers' add() calls themselves, from the call to its answer: a job's wait cannot be
   * shorter than its add's commit, which waits for the disk's flush.
   */
  adds?: Waits;
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
  /** Our drain of JOBS queued jobs with the two worker processes (jobs/s): for comparison. */
  drainPerSecond: number;
  /** Jobs/s started while our two producers added flat out, the workers running: the base of every system's offered rates. */
  capacityPerSecond: number;
  systems: SustainedSystemResult[];
}

const PROCESSES = 2;
const SLICE_S = 10;
const MAX_P99_MS = 100;
/** Jobs the drain's processes run first, so that it does not time a cold start. */
const WARM_UP_JOBS = 2_000;
/** Seconds of load before a system's first step, uncounted (ours: the capacity's). */
const WARM_UP_S = 10;

const TABLES: Record<SustainedSystem, Record<string, string>> = {
  'nestjs-job-queue': { jobs: 'job_queue.jobs', finished_jobs: 'job_queue.finished_jobs' },
  'graphile-worker': { jobs: 'graphile_worker._private_jobs' },
  'graphile-worker batched': { jobs: 'graphile_worker._private_jobs' },
};

/**
 * The sustained lines of one round, each system on `database` made afresh on `serverUrl`'s
 * server. Ours first: the rate its producers and workers reach flat out is the base of every
 * system's offered rates.
 */
export async function runSustained(
  serverUrl: string,
  database: string,
  config: BenchConfig,
  step: Progress,
  only: readonly SustainedSystem[] = SUSTAINED_SYSTEMS,
): Promise<SustainedResult> {
  const result: SustainedResult = { drainPerSecond: 0, capacityPerSecond: 0, systems: [] };
  for (const system of SUSTAINED_SYSTEMS.filter((s) => s === 'nestjs-job-queue' || only.includes(s))) {
    const url = await recreateDatabase(serverUrl, database);
    const measureBase = async (run: Run) => {
      step(`sustained: our drain of ${config.jobs} jobs with ${PROCESSES} worker processes`);
      await drainOf(run, WARM_UP_JOBS);
      result.drainPerSecond = await drainOf(run, config.jobs);
      step(`sustained: our capacity, ${PROCESSES} producers adding flat out for ${WARM_UP_S} s`);
      result.capacityPerSecond = await capacityOf(run);
    };
    result.systems.push(await onSystem(url, system, config, step, system === 'nestjs-job-queue' ? measureBase : undefined, () => result.capacityPerSecond));
  }
  return result;
}

type Counted = { started: number; added: number; cpuMicros: number };

/** A system's bench connection, processes, and the starts its workers reported. */
interface Run {
  bench: Queryable;
  producers: SustainedProcess[];
  counts(): Promise<Counted>;
  samples: number[];
  /** Jobs started that no producer added (the drain's): the backlog is the producers' adds less the other starts. */
  notAdded: number;
}

/**
 * Every step for one system: its schema made by a bench connection of its own, then its
 * processes forked; `measureBase` (ours) warms it up, else the first step's rate does.
 */
async function onSystem(
  url: string,
  system: SustainedSystem,
  config: BenchConfig,
  step: Progress,
  measureBase: ((run: Run) => Promise<void>) | undefined,
  base: () => number,
): Promise<SustainedSystemResult> {
  const opened = system === 'nestjs-job-queue' ? await openApp(url, config) : await openGraphileWorker(url, config);
  const graphile = system === 'nestjs-job-queue' ? undefined : graphileQueryable(url);
  const bench = graphile ?? (opened as Awaited<ReturnType<typeof openApp>>).dataSource;
  const samples: number[] = [];
  const processes: SustainedProcess[] = [];
  try {
    // opened together; each kept as it opens, so that the finally closes it whatever failed
    const open = async (role: 'producer' | 'worker') => {
      const opening = await Promise.allSettled(
        Array.from({ length: PROCESSES }, (_, i) =>
          SustainedProcess.open(url, config, system, role, i, (more) => {
            for (const value of more) samples.push(value);
          }).then((p) => (processes.push(p), p)),
        ),
      );
      const failed = opening.find((o) => o.status === 'rejected');
      if (failed) throw failed.reason;
      return opening.map((o) => (o as PromiseFulfilledResult<SustainedProcess>).value);
    };
    await open('worker');
    const producers = await open('producer');
    const counts = async (): Promise<Counted> => {
      const all = await Promise.all(processes.map((p) => p.counts()));
      return all.reduce((sum, c) => ({ started: sum.started + c.started, added: sum.added + c.added, cpuMicros: sum.cpuMicros + c.cpuMicros }), { started: 0, added: 0, cpuMicros: 0 });
    };
    const run: Run = { bench, producers, counts, samples, notAdded: 0 };
    if (measureBase) await measureBase(run);
    else {
      step(`sustained: ${system}, warm-up: ${WARM_UP_S} s at the first step's rate`);
      await load(run, (base() * config.sustainedSteps[0]) / 100, WARM_UP_S);
    }
    // every job started by now (load() waited): what started beyond the adds is the drain's
    const caughtUp = await counts();
    run.notAdded = caughtUp.started - caughtUp.added;
    const steps: SustainedStep[] = [];
    for (const percent of config.sustainedSteps) {
      step(`sustained: ${system}, ${percent} % of ${Math.round(base())} jobs/s for ${config.sustainedSeconds} s`);
      samples.length = 0;
      const done = await runStep(run, system, percent, base(), config.sustainedSeconds);
      steps.push(done);
      if (done.failed) break;
    }
    return { system, steps };
  } finally {
    await Promise.all(processes.map((p) => p.close()));
    await graphile?.end();
    await opened.close();
  }
}

async function runStep(run: Run, system: SustainedSystem, percent: number, base: number, seconds: number): Promise<SustainedStep> {
  const { bench, producers, counts, samples } = run;
  const offered = (base * percent) / 100;
  const go = performance.timeOrigin + performance.now();
  const producing = Promise.all(producers.map((p) => p.produce(offered / producers.length, seconds)));
  const slices: Array<Omit<SustainedSlice, 'waits'>> = [];
  let before = { counted: await counts(), postgresMs: postgresCpuMs(), at: go };
  for (let end = SLICE_S; end < seconds + SLICE_S; end += SLICE_S) {
    const endAt = go + Math.min(end, seconds) * 1000;
    await sleep(Math.max(0, endAt - (performance.timeOrigin + performance.now())));
    const now = { counted: await counts(), postgresMs: postgresCpuMs(), at: performance.timeOrigin + performance.now() };
    const elapsedMs = now.at - before.at;
    slices.push({
      startS: end - SLICE_S,
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
  // every job added so far and not started, the last step's leftovers included
  const backlog = end.added - (end.started - run.notAdded);
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
    percent,
    offeredPerSecond: offered,
    addedPerSecond: added / seconds,
    producersBehindMs: behind,
    waits,
    adds: waitsOf(produced.flatMap((p) => p.addMs)),
    backlog,
    failed,
    slices: slices.map((slice, i) => ({ ...slice, waits: waitsOf(bySlice[i]) })),
  };
}

/**
 * The producers at `rate` a second (null: flat out) for `seconds`, then until every job added
 * has started (at most a minute): the jobs started a second over the adds' time.
 */
async function load(run: Run, rate: number | null, seconds: number): Promise<number> {
  const before = await run.counts();
  const started = performance.now();
  await Promise.all(run.producers.map((p) => p.produce(rate === null ? null : rate / run.producers.length, seconds)));
  const during = await run.counts();
  const perSecond = ((during.started - before.started) * 1000) / (performance.now() - started);
  const deadline = Date.now() + 60_000;
  for (;;) {
    const now = await run.counts();
    const [ran, added] = [now.started - before.started, now.added - before.added];
    if (ran >= added) return perSecond;
    if (Date.now() > deadline) throw new Error(`the jobs added did not all start within a minute of the adds: ${ran} of ${added}`);
    await sleep(50);
  }
}

/** Our producers adding flat out for WARM_UP_S, the workers running: the jobs started a second. */
function capacityOf(run: Run): Promise<number> {
  return load(run, null, WARM_UP_S);
}

/** `count` jobs without a timestamp inserted at once, timed from the "go" to their last start as the workers count them: jobs/s. */
async function drainOf({ bench, counts }: Run, count: number): Promise<number> {
  const startedBefore = (await counts()).started;
  await insertJobs(bench, count);
  const go = performance.now();
  await notifyWorkers(bench);
  const deadline = Date.now() + drainTimeoutMs(count);
  for (;;) {
    const started = (await counts()).started - startedBefore;
    if (started >= count) return (count * 1000) / (performance.now() - go);
    if (Date.now() > deadline) throw new Error(`only ${started} of ${count} jobs ran in the drain`);
    await sleep(10);
  }
}

/** A plain pg pool of one connection to read graphile-worker's table with. */
function graphileQueryable(url: string) {
  const pool = new Pool({ connectionString: url, max: 1 });
  return { query: async (text: string, values?: unknown[]) => (await pool.query(text, values)).rows, end: () => pool.end() };
}
