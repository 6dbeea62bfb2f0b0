import type { BenchConfig } from './config';
import { recreateDatabase } from './database';
import { openPlainSqlAdder } from './plain-sql-add';
import { perSecond, type Progress } from './suite';
import { openGraphileWorker } from './system-graphile-worker';
import { openApp } from './system-nestjs-job-queue';

/** Awaited single adds, each its own commit, of the three systems (jobs/s). */
export interface AddOneResult {
  /** nestjs-job-queue's add(). */
  ours: number;
  /** graphile-worker's WorkerUtils.addJob(). */
  theirs: number;
  /** add()'s own insert statement from a plain node-pg client (plain-sql-add.ts). */
  raw: number;
}

export type AddOneSystem = keyof AddOneResult;

/** One system's awaited single add, and how to let go of it. */
export interface SingleAdder {
  addOne(index: number): Promise<unknown>;
  close(): Promise<void>;
}

/** The order of the first slice; each next slice starts one system later. */
const SYSTEMS: readonly AddOneSystem[] = ['ours', 'theirs', 'raw'];
/** Uncounted adds per system before the slices: connections, prepared statements and code paths warm. */
const WARM_UP_ADDS = 10;

/**
 * The three systems open at once, each on a fresh database of its own (`databases`), then
 * `config.addOneSlices` slices of adds, every system taking its turn in each slice, the order
 * rotated from slice to slice; each system timed over its own slices only. Each add waits for
 * an fsync, whose time drifts by tens of percent from one phase of a round to the next
 * (checkpoints, other load): interleaved, the drift weighs on the three alike and drops out
 * of their ratios. The suites that follow recreate these databases.
 */
export async function measureAddOneInterleaved(
  serverUrl: string,
  databases: Record<AddOneSystem, string>,
  config: BenchConfig,
  progress: Progress,
): Promise<AddOneResult> {
  const opened: SingleAdder[] = [];
  const keep = async (adder: Promise<SingleAdder>) => {
    opened.push(await adder);
    return adder;
  };
  try {
    const adders: Record<AddOneSystem, SingleAdder> = {
      ours: await keep(openApp(await recreateDatabase(serverUrl, databases.ours), config)),
      theirs: await keep(openGraphileWorker(await recreateDatabase(serverUrl, databases.theirs), config)),
      raw: await keep(openPlainSqlAdder(await recreateDatabase(serverUrl, databases.raw))),
    };
    const sizes = sliceSizes(config.addOneJobs, config.addOneSlices);
    progress(`add() one at a time, interleaved: ${describeSlices(sizes)} for each of nestjs-job-queue, graphile-worker, plain SQL`);
    return await addInRotatingSlices(adders, sizes);
  } finally {
    await closeAll(opened);
  }
}

async function addInRotatingSlices(adders: Record<AddOneSystem, SingleAdder>, sizes: number[]): Promise<AddOneResult> {
  const nextIndex: Record<AddOneSystem, number> = { ours: 0, theirs: 0, raw: 0 };
  const ms: Record<AddOneSystem, number> = { ours: 0, theirs: 0, raw: 0 };
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
  return { ours: perSecond(total, ms.ours), theirs: perSecond(total, ms.theirs), raw: perSecond(total, ms.raw) };
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
