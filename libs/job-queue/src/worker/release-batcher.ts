import { backoffMs, sleep } from './backoff';

interface Failure {
  id: string;
  error: string;
  delayMs: number;
}

export type FlushReleases = (completed: string[], failedIds: string[], errors: string[], delaysMs: number[]) => Promise<void>;

/**
 * Collects finished jobs and writes them in batches: one statement per flush, at most one
 * flush in flight; what finishes meanwhile waits for the next flush. A failing flush is
 * retried with backoff, never dropped: the jobs stay locked by this worker until it lands.
 */
export class ReleaseBatcher {
  private completed: string[] = [];
  private failed: Failure[] = [];
  private timer?: NodeJS.Timeout;
  private inFlight?: Promise<void>;
  private readonly stopping = new AbortController();

  constructor(
    private readonly write: FlushReleases,
    private readonly onError: (error: unknown) => void,
    /** Milliseconds a finished job may wait to share a flush. */
    private readonly delayMs = 1,
  ) {}

  complete(id: string): void {
    this.completed.push(id);
    this.schedule();
  }

  fail(id: string, error: string, delayMs: number): void {
    this.failed.push({ id, error, delayMs });
    this.schedule();
  }

  get pending(): number {
    return this.completed.length + this.failed.length;
  }

  /** Nothing collected, waiting for its timer, or being written. */
  get idle(): boolean {
    return this.pending === 0 && !this.timer && !this.inFlight;
  }

  private schedule(): void {
    if (this.timer || this.inFlight) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, this.delayMs);
  }

  /** Writes everything collected so far; resolves once it is in the database. */
  async flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    while (this.inFlight) await this.inFlight;
    if (this.pending === 0) return;
    this.inFlight = this.writeBatch();
    try {
      await this.inFlight;
    } finally {
      this.inFlight = undefined;
    }
    if (this.pending > 0) this.schedule();
  }

  private async writeBatch(): Promise<void> {
    const completed = this.completed;
    const failed = this.failed;
    this.completed = [];
    this.failed = [];
    for (let attempt = 1; ; attempt++) {
      try {
        await this.write(
          completed,
          failed.map((f) => f.id),
          failed.map((f) => f.error),
          failed.map((f) => f.delayMs),
        );
        return;
      } catch (error) {
        this.onError(error);
        // While shutting down, give up after a few tries: the jobs stay locked by this worker.
        if (this.stopping.signal.aborted && attempt >= 5) return;
        await sleep(backoffMs(attempt), this.stopping.signal.aborted ? undefined : this.stopping.signal);
      }
    }
  }

  /** Flushes what is left; retries are cut short from here on. */
  async stop(): Promise<void> {
    this.stopping.abort();
    await this.flush();
  }
}
