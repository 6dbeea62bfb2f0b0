import type { BenchConfig } from './config';
import { recreateDatabase } from './database';
import { openPlainMessageAdder, openPlainSqlAdder, type SingleAdder } from './plain-sql-add';
import { perSecond, type Progress } from './suite';
import { openGraphileWorker } from './system-graphile-worker';
import { openApp } from './system-nestjs-job-queue';

/** Awaited single adds, each its own commit, of the two queues and two plain-SQL adders (jobs/s). */
export interface AddOneResult {
  /** nestjs-job-queue's add(). */
  ours: number;
  /** graphile-worker's WorkerUtils.addJob(). */
  theirs: number;
  /** add()'s own insert statement from a plain node-pg client (plain-sql-add.ts). */
  raw: number;
  /** The message add() sends (that insert, its commit, the NOTIFY after it) from a plain node-pg client (plain-sql-add.ts). */
  message: number;
}

export type AddOneSystem = keyof AddOneResult;

/** Bulk adds of `chunkSize` jobs per call, one call at a time, of the two queues (jobs/s). */
export interface AddManyResult {
  /** nestjs-job-queue's addMany(). */
  ours: number;
  /** graphile-worker's WorkerUtils.addJobs(). */
  theirs: number;
}

/** What the interleaved phase measures. */
export interface AddsResult {
  one: AddOneResult;
  many: AddManyResult;
}

/** A queue's adder that also adds in bulk. */
interface BulkAdder extends SingleAdder {
  addMany(fromIndex: number, count: number): Promise<unknown>;
}

/** The order of the first slice; each next slice starts one system later. */
const SYSTEMS: readonly AddOneSystem[] = ['ours', 'theirs', 'raw', 'message'];
/** Uncounted adds per system before the slices: connections, prepared statements and code paths warm. */
const WARM_UP_ADDS = 10;

/**
 * The four adders open at once, each on a fresh database of its own (`databases`), then:
 * - `config.addOneSlices` slices of single adds, every system taking its turn in each slice,
 *   the order rotated from slice to slice;
 * - `config.jobs` jobs by `config.chunkSize` per addMany() call of the two queues, call by
 *   call, the order swapped from call to call.
 * Each system is timed over its own turns only. Each single add waits for an fsync, whose
 * time drifts by tens of percent from one phase of a round to the next (checkpoints, other
 * load), and the machine's own speed drifts too: interleaved, the drift weighs on all alike
 * and drops out of their ratios. The suites that follow recreate these databases.
 */
export async function measureAddsInterleaved(
  serverUrl: string,
  databases: Record<AddOneSystem, string>,
  config: BenchConfig,
  progress: Progress,
): Promise<AddsResult> {
  const opened: SingleAdder[] = [];
  const keep = async <Adder extends SingleAdder>(adder: Promise<Adder>) => {
    opened.push(await adder);
    return adder;
  };
  try {
    const ours = await keep(openApp(await recreateDatabase(serverUrl, databases.ours), config));
    const theirs = await keep(openGraphileWorker(await recreateDatabase(serverUrl, databases.theirs), config));
    const raw = await keep(openPlainSqlAdder(await recreateDatabase(serverUrl, databases.raw)));
    const message = await keep(openPlainMessageAdder(await recreateDatabase(serverUrl, databases.message)));
    const sizes = sliceSizes(config.addOneJobs, config.addOneSlices);
    progress(`add() one at a time, interleaved: ${describeSlices(sizes)} for each of nestjs-job-queue, graphile-worker, plain SQL (the insert, and add()'s message)`);
    const one = await addInRotatingSlices({ ours, theirs, raw, message }, sizes);
    progress(`addMany(), interleaved: ${config.jobs} jobs in calls of ${config.chunkSize} for each of nestjs-job-queue, graphile-worker`);
    const many = await addManyInTurns({ ours, theirs }, config.jobs, config.chunkSize);
    return { one, many };
  } finally {
    await closeAll(opened);
  }
}

async function addInRotatingSlices(adders: Record<AddOneSystem, SingleAdder>, sizes: number[]): Promise<AddOneResult> {
  const nextIndex: Record<AddOneSystem, number> = { ours: 0, theirs: 0, raw: 0, message: 0 };
  const ms: Record<AddOneSystem, number> = { ours: 0, theirs: 0, raw: 0, message: 0 };
  for (let i = 0; i < WARM_UP_ADDS; i++) {
    for (const system of SYSTEMS) await adders[system].addOne(nextIndex[system]++);
  }
  for (const [slice, size] of sizes.entries()) {
    for (const system of rotated(SYSTEMS, slice)) {
      const started = performance.now();
      for (let i = 0; i < size; i++) await adders[system].addOne(nextIndex[system]++);
      ms[system] += performance.now() - started;
    }
  }
  const total = sizes.reduce((a, b) => a + b, 0);
  return { ours: perSecond(total, ms.ours), theirs: perSecond(total, ms.theirs), raw: perSecond(total, ms.raw), message: perSecond(total, ms.message) };
}

/** `count` jobs by `chunkSize` per addMany() call of each queue, the two taking turns call by call, which one goes first swapped at each turn. */
async function addManyInTurns(adders: Record<keyof AddManyResult, BulkAdder>, count: number, chunkSize: number): Promise<AddManyResult> {
  const order: Array<keyof AddManyResult> = ['ours', 'theirs'];
  const ms = { ours: 0, theirs: 0 };
  for (const system of order) await adders[system].addMany(0, Math.min(chunkSize, 10)); // warm
  for (let from = 0, turn = 0; from < count; from += chunkSize, turn++) {
    for (const system of rotated(order, turn)) {
      const started = performance.now();
      await adders[system].addMany(from, Math.min(chunkSize, count - from));
      ms[system] += performance.now() - started;
    }
  }
  return { ours: perSecond(count, ms.ours), theirs: perSecond(count, ms.theirs) };
}

/** `total` adds in `slices` slices whose sizes differ by at most one (fewer slices when `total` is smaller). */
export function sliceSizes(total: number, slices: number): number[] {
  const count = Math.min(total, slices);
  return Array.from({ length: count }, (_, i) => Math.floor(((i + 1) * total) / count) - Math.floor((i * total) / count));
}

/** "20 slices of 100 adds", or "20 slices of 5–6 adds". */
export function describeSlices(sizes: number[]): string {
  const [min, max] = [Math.min(...sizes), Math.max(...sizes)];
  return `${sizes.length} slice${sizes.length === 1 ? '' : 's'} of ${min === max ? min : `${min}–${max}`} adds`;
}

function rotated<T>(items: readonly T[], by: number): T[] {
  const shift = by % items.length;
  return [...items.slice(shift), ...items.slice(0, shift)];
}

/** Every adder closed even if one fails to; the first failure is thrown. */
async function closeAll(adders: SingleAdder[]): Promise<void> {
  const results = await Promise.allSettled(adders.map((adder) => adder.close()));
  const failed = results.find((result): result is PromiseRejectedResult => result.status === 'rejected');
  if (failed) throw failed.reason;
}
