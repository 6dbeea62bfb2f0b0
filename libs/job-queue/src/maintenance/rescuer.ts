import type { Logger } from '@nestjs/common';
import type { PinnedConnection } from '../db/pinned-connection';
import type { JobQueueEvents } from '../events/job-queue-events';

/** Jobs released per statement: each sweep statement stays short. */
const BATCH = 1_000;

interface RescuedJob {
  id: string;
  taskIdentifier: string;
  workerId: string;
  started: boolean;
  failed: boolean;
}

/**
 * Finds workers whose heartbeat is older than their own timeout, deletes their rows and
 * releases their jobs and queues (sql/maintenance.ts rescueJobs), batch after batch. Emits
 * `job:rescued` per job, and publishes the queue events `audience` (the listeners' filter, or
 * null) wants. `orphanMarginMs`: how old a lock must be before a lock whose worker has no row
 * is released.
 */
export async function rescueDeadWorkers(
  pinned: PinnedConnection,
  events: JobQueueEvents,
  orphanMarginMs: number,
  logger: Logger,
  audience: string | null = null,
): Promise<number> {
  let total = 0;
  for (;;) {
    const [row] = await pinned.run<{ rescued: RescuedJob[]; dead: string[]; freed_queues: number }>('rescueJobs', [BATCH, orphanMarginMs, audience]);
    for (const id of row.dead) logger.warn(`Worker ${id} stopped heartbeating: declared dead`);
    for (const job of row.rescued) {
      events.emit({
        type: 'job:rescued',
        jobId: job.id,
        taskIdentifier: job.taskIdentifier,
        deadWorkerId: job.workerId,
        started: job.started,
        failed: job.failed,
      });
    }
    if (row.rescued.length > 0) {
      const started = row.rescued.filter((job) => job.started);
      logger.warn(
        `Rescued ${row.rescued.length} job(s) of dead worker(s) ${[...new Set(row.rescued.map((job) => job.workerId))].join(', ')}: ` +
          `${started.length} had started (an attempt counted, JQ_WORKER_LOST${started.some((job) => job.failed) ? `; failed for good: ${started.filter((job) => job.failed).map((job) => job.id).join(', ')}` : ''}), ` +
          `${row.rescued.length - started.length} were only claimed (put back as they were)`,
      );
    }
    total += row.rescued.length;
    if (row.rescued.length < BATCH) return total;
  }
}
