/**
 * How many claimed jobs a worker may hold beyond its running ones, so that fast jobs start
 * without a round trip to the database each: about PREFETCH_MS of work at the observed job
 * duration, at most MAX_FACTOR × concurrency. Slow jobs are not prefetched at all, so they
 * stay in the table for idle workers elsewhere.
 */
const PREFETCH_MS = 20;
// 50 rather than 20: claims of about 250 trivial jobs rather than 100 drain 15 % faster, and
// 50 % faster on a long backlog, where each claim first walks past the dead index entries of
// the claims before it.
const MAX_FACTOR = 50;

/**
 * The most jobs a worker holds at once, per unit of concurrency: running, prefetched, and
 * finished with their release not written yet. When releases fall behind (a slow or
 * unreachable database, a lock on the history), the worker stops claiming rather than piling
 * up outcomes in memory and keeping jobs that other workers could run. A drain holds about a
 * tenth of it (two claims' worth and a flush in flight).
 */
const HELD_FACTOR = 200;

export function maxHeld(concurrency: number): number {
  return HELD_FACTOR * concurrency;
}

export class PrefetchSizer {
  /** Moving average of job durations, ms. Starts pessimistic: nothing is prefetched until jobs prove fast. */
  private averageMs = 1000;

  constructor(private readonly concurrency: () => number) {}

  record(durationMs: number): void {
    this.averageMs = this.averageMs * 0.9 + durationMs * 0.1;
  }

  get target(): number {
    const concurrency = this.concurrency();
    const jobsInWindow = (concurrency * PREFETCH_MS) / Math.max(this.averageMs, 0.001);
    return Math.min(MAX_FACTOR * concurrency, Math.floor(jobsInWindow));
  }
}
