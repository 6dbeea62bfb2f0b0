import type { PinnedConnection } from '../db/pinned-connection';

const BATCH = 1_000;

/**
 * Deletes the rows of named queues that nobody holds and no available job names, batch
 * after batch, so that per-customer queues (`sync:customer-123`) do not pile up. Safe against
 * adds racing it: the claim creates a queue's row again when it locks the queue.
 */
export async function deleteIdleQueues(pinned: PinnedConnection): Promise<number> {
  let total = 0;
  for (;;) {
    const rows = await pinned.run('deleteIdleQueues', [BATCH]);
    total += rows.length;
    if (rows.length < BATCH) return total;
  }
}
