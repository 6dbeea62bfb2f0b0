import { Inject, Injectable } from '@nestjs/common';
import { mergeQueueEventFilters, type QueueEventFilter } from '../core/queue-events';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { JobQueueDatabase } from '../db/job-queue-database';

/**
 * What the cluster's live listeners of queue events want (the `event_listeners` rows, merged),
 * for the statements that publish events: the release batcher, the transactional
 * completion, cancelJob. Read at most once a heartbeatInterval, and again at once when a
 * listener comes or goes (it tells workers on the jobs channel, and the worker calls
 * refresh()). With no listener the filter is null and nothing is published, so a cluster
 * that does not listen pays one small read per process every heartbeatInterval.
 */
@Injectable()
export class QueueEventAudience {
  private filter: string | null = null;
  private readAt = -Infinity;
  private reading?: Promise<void>;

  constructor(
    private readonly db: JobQueueDatabase,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
  ) {}

  /**
   * The merged filter as a statement's jsonb parameter (null: nobody listens), without
   * waiting: the hot path never waits for this read. A stale one starts a new read, which
   * the next call sees.
   */
  current(): string | null {
    if (Date.now() - this.readAt >= this.options.heartbeatInterval) void this.refresh();
    return this.filter;
  }

  /** The merged filter, read now if the last read is stale: for paths that are not hot (an admin's cancel). */
  async fresh(): Promise<string | null> {
    if (Date.now() - this.readAt >= this.options.heartbeatInterval) await this.refresh();
    return this.filter;
  }

  /** Reads the listeners again (once at a time; a call during a read waits for it). */
  refresh(): Promise<void> {
    this.reading ??= this.read().finally(() => (this.reading = undefined));
    return this.reading;
  }

  private async read(): Promise<void> {
    try {
      const rows = await this.db.run<{ filter: QueueEventFilter }>('eventListenerFilters', []);
      const merged = mergeQueueEventFilters(rows.map((row) => row.filter));
      this.filter = merged && JSON.stringify(merged);
      this.readAt = Date.now();
    } catch {
      // kept as it was: the next call tries again (the worker reports database trouble elsewhere)
    }
  }
}
