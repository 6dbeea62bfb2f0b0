/** A paused task ('*': every task) or named queue, as listPaused() returns it. */
export interface PausedEntry {
  kind: 'task' | 'queue';
  name: string;
  /** When it was paused. */
  since: Date;
}

/** A row of sql listPaused. */
export interface PausedRow {
  kind: 'task' | 'queue';
  name: string;
  paused_at: Date;
}

export const toPausedEntry = (row: PausedRow): PausedEntry => ({ kind: row.kind, name: row.name, since: row.paused_at });

/**
 * What a worker keeps of the `pauses` table, for its claims and its local starts: read at its
 * start, again before the next claim once told on the jobs channel (payload `paused`) or at a
 * poll (markStale), so that a pause holds every claim within a notification's delay, or a
 * pollInterval when one is lost. Claims get it as parameters (claimTasks for $1, queues for
 * $6): with nothing paused they are the arrays they were before, and the claim costs the same.
 *
 * A failed read keeps what was read last (reported by `onError`); the next poll tries again.
 */
export class PausedSet {
  private tasks = new Set<string>();
  private all = false;
  private pausedQueues: string[] = [];
  private entries: readonly PausedEntry[] = [];
  private stale = true;
  private reading?: Promise<void>;

  constructor(
    private readonly read: () => Promise<PausedRow[]>,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** Told that the pauses changed, or polling: the next claim reads them first. */
  markStale(): void {
    this.stale = true;
  }

  /** Reads the table if it may have changed since the last read (a change told during a read is read again). */
  async fresh(): Promise<void> {
    while (this.stale) await this.refresh();
  }

  /** Reads the table now (one read at a time: a call during one waits for it). */
  refresh(): Promise<void> {
    this.reading ??= this.load().finally(() => (this.reading = undefined));
    return this.reading;
  }

  /** A notification or a poll asked for a read that has not begun. */
  get isStale(): boolean {
    return this.stale;
  }

  /** What this worker last read. */
  get list(): readonly PausedEntry[] {
    return this.entries;
  }

  /** The claim's tasks ($1): `identifiers` less the paused ones; none while '*' is paused. The same array when nothing is paused. */
  claimTasks(identifiers: string[]): string[] {
    if (this.all) return [];
    if (this.tasks.size === 0) return identifiers;
    return identifiers.filter((identifier) => !this.tasks.has(identifier));
  }

  /** The paused named queues (the claim's $6). */
  get queues(): string[] {
    return this.pausedQueues;
  }

  /** Whether `task` may start now (a job started at its add: service/local-start.ts). */
  runs(task: string): boolean {
    return !this.all && !this.tasks.has(task);
  }

  private async load(): Promise<void> {
    this.stale = false;
    try {
      const rows = await this.read();
      const tasks = rows.filter((row) => row.kind === 'task').map((row) => row.name);
      this.all = tasks.includes('*');
      this.tasks = new Set(tasks);
      this.pausedQueues = rows.filter((row) => row.kind === 'queue').map((row) => row.name);
      this.entries = rows.map(toPausedEntry);
    } catch (error) {
      this.onError(error);
    }
  }
}
