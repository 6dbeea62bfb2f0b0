import type { PinnedConnection } from '../db/pinned-connection';

/** Deltas folded per statement: a few milliseconds of work, however many piled up meanwhile. */
const BATCH = 10_000;

/**
 * Folds the job counters' deltas (one row per statement that added or removed jobs, sql/counts.ts)
 * into their counts, batch after batch, so that countJobs() sums a few rows per task rather
 * than one per add since the last round; then drops the counts that reached zero.
 */
export async function foldJobCounts(pinned: PinnedConnection): Promise<number> {
  let total = 0;
  for (;;) {
    const [{ folded }] = await pinned.run<{ folded: number }>('foldJobCounts', [BATCH]);
    total += folded;
    if (folded < BATCH) break;
  }
  if (total > 0) await pinned.run('deleteEmptyJobCounts', []);
  return total;
}
