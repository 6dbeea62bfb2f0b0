import type { PinnedConnection } from '../db/pinned-connection';
import type { Retention } from '../core/options';
import { FINISHED_STATES } from '../core/job-state';

/** Rows per statement: each holds its row locks for a moment only. */
const BATCH = 1_000;

/**
 * Retention: deletes finished jobs older than the retention of their state, oldest first, in
 * batches of BATCH, until none is left or `budgetMs` is spent (the next round goes on). A
 * state kept forever (null) is skipped. Rows a caller has locked are skipped, not waited for.
 */
export async function deleteExpiredJobs(pinned: PinnedConnection, retention: Retention, budgetMs: number): Promise<number> {
  const deadline = Date.now() + budgetMs;
  let total = 0;
  for (const state of FINISHED_STATES) {
    const keepMs = retention[state];
    if (keepMs === null) continue;
    for (;;) {
      const [row] = await pinned.run<{ deleted: number }>('deleteExpiredJobs', [state, keepMs, BATCH]);
      total += row.deleted;
      if (row.deleted < BATCH || Date.now() >= deadline) break;
    }
  }
  return total;
}
