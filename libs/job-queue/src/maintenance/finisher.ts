import type { PinnedConnection } from '../db/pinned-connection';

const BATCH = 1_000;

/**
 * Moves unfinished rows that are done all the same to finished_jobs, batch after batch: jobs
 * out of attempts that no worker holds (the last attempt of a rescued job, an admin call, a
 * worker of the previous version), and cancelled jobs a worker let go of (a give-back at
 * shutdown, a rescue). Workers write their own finished jobs; this catches the rest.
 */
export async function finishLeftovers(pinned: PinnedConnection): Promise<number> {
  let total = 0;
  for (;;) {
    const [row] = await pinned.run<{ moved: number }>('finishLeftovers', [BATCH]);
    total += row.moved;
    if (row.moved < BATCH) return total;
  }
}
