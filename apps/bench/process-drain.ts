import { setTimeout as sleep } from 'node:timers/promises';
import { notifyWorkers, type Queryable } from './jobs-table';
import { drainTimeoutMs, perSecond, waitUntilNoJobs, type QueueUnderTest } from './suite';
import type { WorkerProcess } from './worker-process-handle';

/** One drain by worker processes, both ways of timing it. */
export interface ProcessDrain {
  /** From the go to the last handler start any process reported (handlers do nothing: started is finished), jobs/s. */
  perSecond?: number;
  /** From the go until no job was left in the table (every completion written; polled every 20 ms), jobs/s. */
  emptiedPerSecond?: number;
  /** Why a number is missing: the completions fell behind the handlers, or the table never emptied. */
  stalled?: string;
}

/** How long the table may take to empty once every handler has started. */
const EMPTY_TIMEOUT_MS = 60_000;
/**
 * Completions the workers may hold unwritten before the drain is given up: a healthy worker
 * holds one flush's worth (hundreds). Past this the releases have fallen behind for good, and
 * waiting for the rest would only keep the machine busy.
 */
export const UNWRITTEN_LIMIT = 50_000;
/** How often the table is counted during a drain, for the check above: seldom, as a count scans it. */
const LAG_CHECK_MS = 5_000;

type Db = QueueUnderTest & { dataSource: Queryable };

/**
 * With `count` jobs queued and the `processes` idle: the "go" to all of them at once, timed
 * to the last handler start and to the empty table. Then their workers stop, and a total of
 * handlers run other than `count` (a job run twice) fails the bench. A stalled drain leaves
 * the workers running (stopping would wait for the completions they have yet to write): the
 * caller closes the processes.
 */
export async function drainAcross(app: Db, processes: WorkerProcess[], count: number): Promise<ProcessDrain> {
  const go = epochNow();
  const timed = await timeDrain(app, processes, count, go);
  if (timed.stalled) return timed;
  try {
    await waitUntilNoJobs(app, EMPTY_TIMEOUT_MS);
  } catch {
    const left = (await app.countJobs()).toLocaleString('en-US');
    return { ...timed, stalled: `${left} jobs still in the table a minute after every handler had started (their completions unwritten)` };
  }
  const emptiedPerSecond = perSecond(count, epochNow() - go);
  const counts = await Promise.all(processes.map((p) => p.stop()));
  const total = counts.reduce((a, b) => a + b, 0);
  if (total !== count) throw new Error(`${processes.length} worker process(es) ran ${total} jobs (${counts.join(' + ')}), expected ${count}`);
  return { ...timed, emptiedPerSecond };
}

async function timeDrain(app: Db, processes: WorkerProcess[], count: number, go: number): Promise<ProcessDrain> {
  await Promise.all(processes.map((p) => p.start()));
  // A worker's first claim races its registration (start() wakes it when LISTEN is up, then
  // inserts its row) and claims nothing if it runs first, as it can when the pool has idle
  // connections: the worker then sleeps until its first poll, pollInterval later, with every
  // job queued. The NOTIFY an add would send wakes them all once they are registered.
  await notifyWorkers(app.dataSource);
  const deadline = Date.now() + drainTimeoutMs(count);
  let nextCheck = Date.now() + LAG_CHECK_MS;
  for (;;) {
    const started = processes.reduce((sum, p) => sum + p.started, 0);
    if (started >= count) break;
    if (Date.now() > deadline) throw new Error(`only ${started} of ${count} jobs ran in ${processes.length} worker process(es)`);
    if (Date.now() >= nextCheck) {
      // jobs in the table = not started yet + started but not released
      const unwritten = (await app.countJobs()) - (count - started);
      if (unwritten > UNWRITTEN_LIMIT) {
        const seconds = ((epochNow() - go) / 1000).toFixed(0);
        return { stalled: `given up after ${seconds} s: ${unwritten.toLocaleString('en-US')} completions unwritten, ${started.toLocaleString('en-US')} handlers started` };
      }
      nextCheck = Date.now() + LAG_CHECK_MS;
    }
    await sleep(10); // how soon the end is noticed, not when it was: that is the processes' lastStartAt
  }
  const lastStart = Math.max(...processes.filter((p) => p.started > 0).map((p) => p.lastStartAt));
  return { perSecond: perSecond(count, lastStart - go) };
}

/** The wall clock in fractional ms, as the worker processes report their handlers' starts (worker-process.ts). */
function epochNow(): number {
  return performance.timeOrigin + performance.now();
}
