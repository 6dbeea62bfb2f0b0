import type { Logger } from '@nestjs/common';
import { sleep } from '../core/backoff';
import type { Executor } from './executor';
import type { Producer } from './producer';
import type { WorkerState } from './worker-state';

/**
 * The worker's drain at shutdown, once it claims no more: lets running jobs finish within the
 * grace period, then aborts them and gives back the unfinished ones with their attempt
 * returned. A handler that ignores the abort keeps its job locked (nothing may run it twice),
 * and the worker keeps heartbeating until it settles or the process exits (then the sweep
 * frees the job). Returns the ids given back.
 */
export async function drainAtShutdown(
  state: WorkerState,
  producer: Producer,
  executor: Executor,
  workerId: string,
  gracePeriodMs: number,
  logger: Logger,
): Promise<string[]> {
  const settled = () => Promise.all([...state.running.values()].map((r) => r.done));
  const graceOver = new AbortController();
  await Promise.race([settled(), sleep(gracePeriodMs, graceOver.signal)]);
  if (state.running.size > 0) {
    for (const entry of state.running.values()) entry.stop(new Error('The worker is shutting down'), () => executor.reportStuck(entry, 'shutdown'));
    // Handlers that honour the signal settle now and are given back below.
    await Promise.race([settled(), sleep(Math.min(200, gracePeriodMs), graceOver.signal)]);
  }
  graceOver.abort(); // no timer left behind to keep the process alive
  // Still running now: kept, from this instant (a success during the flush below is then
  // completed, not given back).
  const kept = [...state.running.values()];
  for (const entry of kept) entry.kept = true;
  // From here on a failing flush is retried a few times only: a database that refuses a
  // release must not hold the shutdown forever (the jobs stay locked, for the sweep).
  state.batcher.retryBriefly();
  await state.batcher.flush();
  state.prefetched.length = 0; // never started: given back below with the unfinished ones
  // Not given back: the kept jobs (and the finished ones whose release is not written yet:
  // batcher.stop() below writes those).
  const givenBack = await producer.giveBack(kept.map((entry) => entry.job.id));
  if (kept.length > 0) {
    logger.error(
      `${kept.length} handler(s) ignored the abort at shutdown: job(s) ${kept.map((e) => e.job.id).join(', ')} stay locked by ` +
        `${workerId}, which keeps heartbeating until they settle. If the process exits first, another worker retries them once ${workerId} times out.`,
    );
    await Promise.all(kept.map((entry) => entry.done));
  }
  await state.batcher.stop();
  // Left now: releases given up after their tries (the database refused them).
  const unwritten = state.batcher.unwrittenIds();
  if (unwritten.length > 0) {
    logger.error(
      `The outcome of ${unwritten.length} finished job(s) could not be written at shutdown: job(s) ${unwritten.join(', ')} stay locked by ` +
        `${workerId}, and another worker runs them again once ${workerId} times out.`,
    );
  }
  return givenBack;
}
