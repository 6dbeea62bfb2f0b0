import { mergeLimits, type EffectiveLimits } from '../core/limits';
import type { Controls } from '../control/controls';
import type { JobQueueDatabase } from '../db/job-queue-database';
import type { ClaimConnection } from './claim-connection';
import type { ClaimedRow } from './claimed-job';
import type { ClaimArgs, LimitedClaimResult, TaskLock } from './limited-claim';
import type { WorkerState } from './worker-state';

/**
 * The claim of a task limited by `globalConcurrency` alone, by slot leases (sql/slot-leases.ts):
 * the worker leases slots of the task under its lock, then claims its jobs with the plain claim
 * (one round trip, no lock), prefetch included (up to PREFETCH_PER_SLOT a slot), and starts at
 * most its lease of them at once (startable(), which the producer asks before it starts a
 * prefetched job), so the task drains as an unlimited task does. Running jobs (lost ones still
 * running included) fill its slots; a finished job's slot frees when its attempt ends.
 *
 * - It asks for min(limit, concurrency) slots when its lease is full or the controls changed
 *   (setTaskLimits: a lowered limit shrinks the lease, never below what it holds).
 * - It gives its lease back when a claim of the task finds nothing and it holds none of its jobs.
 * - A worker that gets no slot (every slot leased elsewhere) tries again at its next claim round
 *   (a NOTIFY, its poll).
 * - Leases belong to the worker's id: fenced (declared dead, its row and leases deleted), it
 *   starts again with none.
 * - A task whose limits change at run time so that it is no longer leased gives its lease back
 *   at the worker's next claim round (dropUnless).
 */
/** How many jobs of a leased task a worker holds (running and prefetched) at most, per slot of its lease. */
const PREFETCH_PER_SLOT = 50;

export class SlotLeases {
  /** Per task: the slots its row keeps, how many of its jobs may run at once here, and the controls' revision they were granted at. */
  private readonly leases = new Map<string, { slots: number; allowed: number; revision: number }>();
  private workerId = '';

  constructor(
    private readonly db: JobQueueDatabase,
    private readonly claims: ClaimConnection,
    private readonly state: WorkerState,
    private readonly controls: Controls,
  ) {}

  /** Claims jobs of `task` (declared limits `declared`, its `limit` as this worker knows it) into its lease, leasing more when it is full. */
  async claim(task: string, declared: EffectiveLimits, limit: number, args: ClaimArgs): Promise<LimitedClaimResult> {
    if (args.workerId !== this.workerId) {
      this.leases.clear();
      this.workerId = args.workerId;
    }
    const running = this.runningOf(task);
    const want = Math.min(limit, this.state.concurrency);
    let lease = this.leases.get(task);
    if (lease === undefined || lease.revision !== this.controls.revision || lease.slots > lease.allowed || (lease.allowed <= running && lease.allowed < want)) {
      lease = { ...(await this.lease(task, declared, want, running, args.workerId)), revision: this.controls.revision };
      this.leases.set(task, lease);
    }
    const prefetched = this.prefetchedOf(task);
    const room = Math.min(args.room, lease.allowed * PREFETCH_PER_SLOT - running - prefetched);
    // No slot here (all are leased elsewhere): the next claim round (a NOTIFY, the poll) asks again. A full prefetch: refilled as it runs low.
    if (room <= 0) return { rows: [], more: false, capped: false, wantsSlot: false, refill: lease.allowed > 0 };
    // The claim marks started only the jobs that start at once: free slots of the worker and of the lease.
    const free = Math.max(0, Math.min(args.free, lease.allowed - running - prefetched, room));
    const rows = await this.claims.run((client) =>
      this.db.runOn<ClaimedRow>(client, 'claimJobs', [[task], args.forbidden, room, args.workerId, free, args.pausedQueues]),
    );
    const full = rows.length > 0 && rows[0].candidate_count >= room;
    if (rows.length === 0 && running === 0 && prefetched === 0) await this.giveBack(task, args.workerId);
    return { rows, more: full, capped: false, wantsSlot: false };
  }

  /**
   * Gives back the leases of tasks no longer leased (`leased` says which are: their limits
   * changed at run time, to none or to counted ones), so that neither this worker's starts nor
   * other workers' counts (sql countTaskSlots) follow them any more.
   */
  async dropUnless(leased: (task: string) => boolean, workerId: string): Promise<void> {
    for (const task of [...this.leases.keys()]) {
      // Its jobs this worker still runs or holds start under the lease (the gate) until there are none.
      if (leased(task) || this.runningOf(task) + this.prefetchedOf(task) > 0) continue;
      await this.giveBack(task, workerId);
      this.leases.delete(task);
    }
  }

  /**
   * After a heartbeat: a lease wider than what the worker runs of its task, with none of its jobs
   * prefetched, shrinks to what runs (a worker kept busy by other tasks does not keep slots other
   * workers could fill); it asks again at its next claim of the task.
   */
  async trim(workerId: string): Promise<void> {
    if (workerId !== this.workerId) return;
    for (const [task, lease] of this.leases) {
      const running = this.runningOf(task);
      if (this.prefetchedOf(task) > 0 || lease.slots <= running) continue;
      try {
        await this.claims.run((client) => this.db.runOn(client, 'shrinkTaskSlots', [task, workerId, running]));
      } catch {
        return; // the database is away: the lease stays as it was (wider, never narrower than what runs), and the next heartbeat tries again
      }
      lease.slots = running;
      lease.allowed = Math.min(lease.allowed, running);
    }
  }

  /** Gives the task's slots back, if any (its row goes): nothing of it runs or waits here. */
  private async giveBack(task: string, workerId: string): Promise<void> {
    const lease = this.leases.get(task);
    if (!lease || lease.slots === 0 || workerId !== this.workerId) return;
    await this.claims.run((client) => this.db.runOn(client, 'shrinkTaskSlots', [task, workerId, 0]));
    lease.slots = 0;
    lease.allowed = 0;
  }

  /**
   * Whether a prefetched job of `task` may start now: its task leases no slots here, or fewer of
   * its jobs run than it leased. `undefined` when this worker leases nothing (every job may start).
   */
  startable(): ((task: string) => boolean) | undefined {
    if (this.leases.size === 0) return undefined;
    const running = this.runningByTask();
    return (task) => {
      const lease = this.leases.get(task);
      if (lease === undefined) return true;
      const now = running.get(task) ?? 0;
      if (now >= lease.allowed) return false;
      running.set(task, now + 1);
      return true;
    };
  }

  /** Leases up to `want` slots of `task` under its lock, its row never below the `running` jobs: the slots kept and how many may run. */
  private async lease(task: string, declared: EffectiveLimits, want: number, running: number, workerId: string): Promise<{ slots: number; allowed: number }> {
    const [granted] = await this.claims.transaction<{ slots: number; allowed: number }, TaskLock>(this.db.sql.lockTaskLimitOf(task), async (client, [{ override }]) => {
      // The limit as stored now, whatever this worker has heard (none any more: as many as it asks for).
      const limit = mergeLimits(declared, override ?? undefined).concurrency ?? want;
      return this.db.runOn<{ slots: number; allowed: number }>(client, 'leaseTaskSlots', [task, workerId, want, limit, running]);
    });
    return granted;
  }

  private prefetchedOf(task: string): number {
    let prefetched = 0;
    for (const job of this.state.prefetched) if (job.taskIdentifier === task) prefetched += 1;
    return prefetched;
  }

  /** The jobs of `task` this worker runs (lost ones still running included). */
  private runningOf(task: string): number {
    return this.runningByTask().get(task) ?? 0;
  }

  /** How many jobs of each task this worker runs, lost ones still running included. */
  private runningByTask(): Map<string, number> {
    const running = new Map<string, number>();
    for (const entry of [...this.state.running.values(), ...this.state.lostRunning]) {
      running.set(entry.job.taskIdentifier, (running.get(entry.job.taskIdentifier) ?? 0) + 1);
    }
    return running;
  }
}
