import { setTimeout as sleep } from 'node:timers/promises';
import { notifyWorkers, type Queryable } from './jobs-table';
import { waitUntilNoJobs, type QueueUnderTest } from './suite';
import type { WorkerProcess } from './worker-process-handle';

/** One drain by worker processes, both ways of timing it. */
export interface ProcessDrain {
  /** From the go to the last handler start any process reported (handlers do nothing: started is finished), jobs/s. */
  perSecond: number;
  /** From the go until no job was left in the table (every completion written; polled every 20 ms), jobs/s; absent if it never emptied. */
  emptiedPerSecond?: number;
  /** Jobs still in the table when the wait for it to empty gave up: the completions the workers had not written. */
  left: number;
}

/** How long the table may take to empty once every handler has started. */
const EMPTY_TIMEOUT_MS = 60_000;

/**
 * With `count` jobs queued and the `processes` idle: the "go" to all of them at once, timed
 * to the last handler start and to the empty table. Then their workers stop, and a total of
 * handlers run other than `count` (a job run twice) fails the bench. If the table did not
 * empty, the workers are left running (stopping would wait for the completions they have
 * yet to write): `left` says so, and the caller closes the processes.
 */
export async function drainAcross(app: QueueUnderTest & { dataSource: Queryable }, processes: WorkerProcess[], count: number): Promise<ProcessDrain> {
  const go = epochNow();
  const perSecond = await timeDrain(app.dataSource, processes, count, go);
  try {
    await waitUntilNoJobs(app, EMPTY_TIMEOUT_MS);
  } catch {
    return { perSecond, left: await app.countJobs() };
  }
  const emptiedPerSecond = (count * 1000) / (epochNow() - go);
  const counts = await Promise.all(processes.map((p) => p.stop()));
  const total = counts.reduce((a, b) => a + b, 0);
  if (total !== count) throw new Error(`${processes.length} worker process(es) ran ${total} jobs (${counts.join(' + ')}), expected ${count}`);
  return { perSecond, emptiedPerSecond, left: 0 };
}

async function timeDrain(db: Queryable, processes: WorkerProcess[], count: number, go: number): Promise<number> {
  await Promise.all(processes.map((p) => p.start()));
  // A worker's first claim races its registration (start() wakes it when LISTEN is up, then
  // inserts its row) and claims nothing if it runs first, as it can when the pool has idle
  // connections: the worker then sleeps until its first poll, pollInterval later, with every
  // job queued. The NOTIFY an add would send wakes them all once they are registered.
  await notifyWorkers(db);
  const deadline = Date.now() + 60_000 + count * 10; // as measureDrain's in suite.ts
  for (;;) {
    const started = processes.reduce((sum, p) => sum + p.started, 0);
    if (started >= count) break;
    if (Date.now() > deadline) throw new Error(`only ${started} of ${count} jobs ran in ${processes.length} worker process(es)`);
    await sleep(10); // how soon the end is noticed, not when it was: that is the processes' lastStartAt
  }
  const lastStart = Math.max(...processes.filter((p) => p.started > 0).map((p) => p.lastStartAt));
  return (count * 1000) / (lastStart - go);
}

/** The wall clock in fractional ms, as the worker processes report their handlers' starts (worker-process.ts). */
function epochNow(): number {
  return performance.timeOrigin + performance.now();
}
