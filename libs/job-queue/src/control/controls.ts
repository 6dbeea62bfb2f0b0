import { timerDelay } from '../core/backoff';
import type { StoredLimits } from '../core/limits';
import { toPausedEntry, type PausedEntry, type PausedRow } from './paused-entry';

/** A row of sql readTaskLimits: a task's limits set at run time. */
export interface TaskLimitsRow {
  task_identifier: string;
  limits: StoredLimits;
}

/** What a worker reads of the control tables, in one go. */
export interface ControlRows {
  pauses: PausedRow[];
  limits: TaskLimitsRow[];
}

/**
 * What a worker keeps of the control tables (`pauses`, `task_limits`), for its claims and its
 * local starts: read at its start, again before the next claim once told on the jobs channel
 * (payload CONTROLS_CHANGED) or at a poll (markStale), so that a pause or a limit set at run
 * time holds every claim within a notification's delay, or a pollInterval when one is lost.
 * Claims get the pauses as parameters (claimTasks for $1, queues for $6): with nothing paused
 * they are the arrays they were before, and the claim costs the same. The limits go to
 * TaskLimits (overrideOf).
 *
 * A hold (a pause with an end: ctx.rateLimited) is kept with its end on this process's clock
 * (the server says how far away it is); once it is over the task is claimed again, and
 * `onHoldEnded` wakes the fetch then.
 *
 * A failed read keeps what was read last (reported by `onError`); the next poll tries again.
 */
export class Controls {
  private tasks = new Set<string>();
  private all = false;
  private pausedQueues: string[] = [];
  private entries: readonly PausedEntry[] = [];
  /** Held tasks: the end of each hold, by Date.now(). */
  private holds = new Map<string, number>();
  /** Holds made here (hold()) whose write (sql holdTask) has not been read back yet: kept over a read that began before it. */
  private pending = new Map<string, number>();
  private holdTimer?: NodeJS.Timeout;
  private overrides: ReadonlyMap<string, StoredLimits> = new Map();
  /** Raised by every read and hold, so that what is derived from the controls knows to derive again. */
  private revisionNumber = 0;
  private stale = true;
  private reading?: Promise<void>;

  constructor(
    private readonly read: () => Promise<ControlRows>,
    private readonly onError: (error: unknown) => void,
    private readonly onHoldEnded: () => void,
  ) {}

  /** Told that the controls changed, or polling: the next claim reads them first. */
  markStale(): void {
    this.stale = true;
  }

  /** Reads the tables if they may have changed since the last read (a change told during a read is read again). */
  async fresh(): Promise<void> {
    while (this.stale) await this.refresh();
  }

  /** Reads the tables now (one read at a time: a call during one waits for it). */
  refresh(): Promise<void> {
    this.reading ??= this.load().finally(() => (this.reading = undefined));
    return this.reading;
  }

  /** A notification or a poll asked for a read that has not begun. */
  get isStale(): boolean {
    return this.stale;
  }

  /** Changes whenever what the controls say may have changed. */
  get revision(): number {
    return this.revisionNumber;
  }

  /** What this worker last read of the pauses. */
  get list(): readonly PausedEntry[] {
    return this.entries;
  }

  /** The claim's tasks ($1): `identifiers` less the paused and held ones; none while '*' is paused. The same array when nothing is. */
  claimTasks(identifiers: string[]): string[] {
    if (this.all) return [];
    this.endHolds();
    if (this.tasks.size === 0 && this.holds.size === 0) return identifiers;
    return identifiers.filter((identifier) => this.runs(identifier));
  }

  /** The paused named queues (the claim's $6). */
  get queues(): string[] {
    return this.pausedQueues;
  }

  /** Whether `task` may start now (a job started at its add: service/local-start.ts). */
  runs(task: string): boolean {
    if (this.all || this.tasks.has(task)) return false;
    const end = this.holds.get(task);
    return end === undefined || end <= Date.now();
  }

  /** Whether a job of `task` in `queue` (null: none) may start now: a job claimed ahead (worker/paused-give-back.ts). */
  starts(task: string, queue: string | null): boolean {
    return this.runs(task) && (queue === null || !this.pausedQueues.includes(queue));
  }

  /** Anything is paused or held: the prefetched jobs must be checked before they start. */
  get anyPaused(): boolean {
    return this.all || this.tasks.size > 0 || this.holds.size > 0 || this.pausedQueues.length > 0;
  }

  /**
   * Holds `task` here for `ms` at once, while `written` (sql holdTask) writes it for every
   * worker; kept over reads until that write has settled and a read has begun after it. A
   * failed write keeps the hold here only.
   */
  hold(task: string, ms: number, written: Promise<unknown>): void {
    const end = Date.now() + ms;
    if ((this.holds.get(task) ?? 0) < end) this.holds.set(task, end);
    this.pending.set(task, Math.max(this.pending.get(task) ?? 0, end));
    this.revisionNumber += 1;
    this.armHoldTimer();
    written.then(
      () => {
        this.pending.delete(task);
        this.markStale();
      },
      () => undefined,
    );
  }

  /** The limits set at run time for `task` (setTaskLimits), if any. */
  overrideOf(task: string): StoredLimits | undefined {
    return this.overrides.get(task);
  }

  private async load(): Promise<void> {
    this.stale = false;
    try {
      const { pauses, limits } = await this.read();
      const now = Date.now();
      const forever = pauses.filter((row) => row.until === null);
      const tasks = forever.filter((row) => row.kind === 'task').map((row) => row.name);
      this.all = tasks.includes('*');
      this.tasks = new Set(tasks);
      this.pausedQueues = forever.filter((row) => row.kind === 'queue').map((row) => row.name);
      this.holds = new Map(pauses.filter((row) => row.until_ms !== null && row.kind === 'task').map((row) => [row.name, now + row.until_ms!]));
      for (const [task, end] of this.pending) if (end > now && (this.holds.get(task) ?? 0) < end) this.holds.set(task, end);
      this.entries = pauses.map(toPausedEntry);
      this.overrides = new Map(limits.map((row) => [row.task_identifier, row.limits]));
      this.revisionNumber += 1;
      this.armHoldTimer();
    } catch (error) {
      this.onError(error);
    }
  }

  /** Forgets the holds that are over. */
  private endHolds(): void {
    if (this.holds.size === 0) return;
    const now = Date.now();
    for (const [task, end] of this.holds) if (end <= now) this.holds.delete(task);
  }

  /** Wakes the fetch when the next hold ends (plus a millisecond: the server counts `until` as over only after it). */
  private armHoldTimer(): void {
    clearTimeout(this.holdTimer);
    this.endHolds();
    if (this.holds.size === 0) return;
    const next = Math.min(...this.holds.values());
    this.holdTimer = setTimeout(() => {
      this.revisionNumber += 1;
      this.armHoldTimer();
      this.onHoldEnded();
    }, timerDelay(next - Date.now() + 1));
    this.holdTimer.unref();
  }
}
