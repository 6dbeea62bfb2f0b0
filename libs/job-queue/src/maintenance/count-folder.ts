import type { PinnedConnection } from '../db/pinned-connection';

/** Deltas folded per statement: a few milliseconds of work, however many piled up meanwhile. */
const BATCH = 10_000;

/**
 * Folds the job counters' deltas (one row per statement that added or removed jobs, sql/counts.ts)
 * into their counts, batch after batch for at most `budgetMs` (a pile left by a round nobody
 * folded in, say while a worker of an earlier version held the lease, goes over several
 * rounds), so that countJobs() sums a few rows per task rather than one per add; then drops
 * the counts that reached zero. Returns how many it folded.
 */
export async function foldJobCounts(pinned: PinnedConnection, budgetMs: number): Promise<number> {
  const until = Date.now() + budgetMs;
  let total = 0;
  for (;;) {
    const [{ folded }] = await pinned.run<{ folded: number }>('foldJobCounts', [BATCH]);
    total += folded;
    if (folded < BATCH || Date.now() >= until) break;
  }
  if (total > 0) await pinned.run('deleteEmptyJobCounts', []);
  return total;
}
