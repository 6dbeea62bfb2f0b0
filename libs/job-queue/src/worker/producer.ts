import { Logger } from '@nestjs/common';
import { backoffMs, sleep, timerDelay } from '../core/backoff';
import type { Job } from '../core/job';
import type { ControlRows } from '../control/controls';
import { TaskLimits } from '../control/task-limits';
import { isLeased, isRated } from '../core/limits';
import { ClaimConnection } from './claim-connection';
import { toClaimedJob, type ClaimedRow } from './claimed-job';
import { claimOf } from '../core/claim-token';
import { giveBackAllBut, giveBackOnce, type GiveBackParts } from './give-back';
import { PausedGiveBack } from './paused-give-back';
import { claimLimited, type ClaimArgs } from './limited-claim';
import { SlotLeases } from './slot-leases';
import { maxHeld, PrefetchSizer } from './prefetch';
import { WakeUps } from './wake-ups';
import { WorkerPart, type WorkerParts } from './worker-state';

/**
 * The worker's fetch loop: wakes on NOTIFY and on its poll, claims batches of jobs (sql
 * claimJobs, on the claim connection) into the free slots and the prefetch room, starts
 * prefetched jobs as slots free up, and gives back what the worker holds but will not run.
 * Claims and the steps that must not overlap them run one at a time, in the fetch chain.
 */
export class Producer extends WorkerPart {
  private readonly logger = new Logger('JobQueueWorker');
  private readonly parts = (): GiveBackParts => ({ membership: this.membership, state: this.state, events: this.events, logger: this.logger });
  private readonly prefetch: PrefetchSizer;
  /** The connection claims run on (claim-connection.ts). */
  private readonly claims: ClaimConnection;
  /** Which tasks have limits (globalConcurrency, rateLimit, groupConcurrency, groupRateLimit): claimed apart (limited-claim.ts). */
  readonly limits: TaskLimits;
  /** The slots this worker leased of tasks limited by globalConcurrency alone (slot-leases.ts). */
  private readonly leases: SlotLeases;
  /** Gives back the prefetched jobs of what was paused since their claim (paused-give-back.ts). */
  private readonly paused: PausedGiveBack;
  /**
   * A limited task's last claim found its limit reached: the next job of this worker to end
   * wakes the fetch (slotFreed), its slot free at once since limited claims do not count this
   * worker's unwritten releases. Slots freed by other workers are found at the next NOTIFY or poll.
   */
  private limitReached = false;
  /**
   * A rate-limited task's last claim took every free slot and may have more: a freed slot goes
   * to a claim round in which the limited tasks claim first, before any prefetched job (else a
   * worker kept busy by a prefetched stream of other jobs never has a free slot at a claim).
   */
  slotWanted = false;
  private freedSlotsWake?: NodeJS.Immediate;
  /** Wakes the fetch when a rate-limited task's window has room again. */
  private rateTimer?: NodeJS.Timeout;
  /** A leased task's prefetch was full with jobs maybe waiting (slot-leases.ts): claim again when the prefetched jobs run low. */
  private refillWanted = false;
  /** The last claim round claimed the limited tasks before the others (they take turns). */
  private limitedFirst = false;
  private pollTimer?: NodeJS.Timeout;
  private retryTimer?: NodeJS.Timeout;
  private fetchChain: Promise<number> = Promise.resolve(0);
  private wakeQueued = false;
  private claimFailures = 0;
  /** A claim, or an insert that claims at its add (local-slots.ts), failed after the server may have committed it: rows may be locked for us that we do not know. */
  claimReplyLost = false;
  /** A claim is on its way: it marks jobs started for the slots that were free when it began (local slots leave them). */
  claiming = false;
  /** The last claim found as many candidates as it asked for: more jobs may be waiting. */
  moreMayBeWaiting = false;
  /** The last fetch claimed nothing because the worker holds too many unwritten releases: the next written flush wakes it. */
  private heldBack = false;

  constructor(
    parts: WorkerParts,
    /** Starts a claimed job's handler (executor.ts). */
    private readonly launch: (job: Job) => void,
  ) {
    super(parts);
    this.prefetch = new PrefetchSizer(() => this.state.concurrency);
    this.claims = new ClaimConnection(() => this.db.pool, this.options.transactionPooling);
    this.limits = new TaskLimits(this.tasks, this.controls);
    this.leases = new SlotLeases(this.db, this.claims, this.state, this.controls);
    this.paused = new PausedGiveBack({ ...this.parts(), controls: this.controls }, (step) => this.serialize(step));
  }

  /** Polls every pollInterval, for future, retried and unnotified jobs. */
  startPolling(): void {
    this.pollTimer = setInterval(() => {
      this.controls.markStale(); // the fallback for a lost notification of a pause or a limit
      void this.wake();
    }, this.options.pollInterval);
  }

  /** Stops polling and retrying; resolves once the fetch under way is done. */
  async stopFetching(): Promise<void> {
    clearInterval(this.pollTimer);
    clearTimeout(this.retryTimer);
    clearTimeout(this.rateTimer);
    await this.fetchChain;
  }

  /** The pauses and the limits set at run time (sql listPaused, readTaskLimits), read on the claim connection, for the worker's Controls. */
  async readControls(): Promise<ControlRows> {
    const [rows] = await this.claims.run(async (client): Promise<ControlRows[]> => [
      { pauses: await this.db.runOn(client, 'listPaused', []), limits: await this.db.runOn(client, 'readTaskLimits', []) },
    ]);
    return rows;
  }

  closeClaims(): Promise<void> {
    return this.claims.close();
  }

  /** Asks for a fetch that claims whatever is next (the general claim); wake-ups that arrive while one is queued share it. */
  wake(): Promise<number> {
    this.wakeUps.any();
    return this.queueFetch();
  }

  /** A NOTIFY named a job added alone: the next fetch may claim the jobs so named by id, where idle workers race for the row (wake-ups.ts). */
  wakeFor(jobId: string): void {
    this.wakeUps.job(jobId);
    void this.queueFetch();
  }

  private readonly wakeUps = new WakeUps();

  private queueFetch(): Promise<number> {
    if (this.wakeQueued) return this.fetchChain;
    this.wakeQueued = true;
    this.fetchChain = this.fetchChain.then(() => {
      this.wakeQueued = false;
      return this.fetchCycle();
    });
    return this.fetchChain;
  }

  /** Claims and runs jobs until a claim that began with nothing held finds nothing (runUntilIdle()). */
  async runWhileAvailable(): Promise<void> {
    const { state } = this;
    while (!state.stopping) {
      // Idle only if a claim that began with nothing running, prefetched or unwritten finds
      // nothing: a result written during the claim may have freed a named queue it skipped.
      const settledBefore = state.running.size === 0 && state.prefetched.length === 0 && state.batcher.idle;
      const claimed = await this.wake();
      if (state.running.size > 0) {
        await Promise.race([...state.running.values()].map((r) => r.done));
      } else if (!state.batcher.idle) {
        await state.batcher.flush();
      } else if (settledBefore && claimed === 0) {
        return;
      } else if (claimed === 0 && state.prefetched.length > 0) {
        // Jobs claimed ahead that may not start yet (a lease elsewhere, a heartbeat awaited): let timers and replies come.
        await sleep(10);
      }
    }
  }

  /** Runs `step` in the fetch chain, after the claim under way. */
  serialize(step: () => Promise<unknown>): void {
    this.fetchChain = this.fetchChain.then(async () => {
      await step();
      return 0;
    });
  }

  /**
   * A flush was written: a fetch held back by unwritten releases has room again. (Not a limit's
   * slot: limited claims stopped counting this worker's jobs when they ended, in slotFreed.)
   */
  releaseWritten(): void {
    if (this.heldBack) void this.wake();
  }

  /**
   * A handler settled (after `durationMs`): hands its slot on in this same step, so that no one
   * (runUntilIdle) sees it empty while prefetched jobs wait, and claims ahead if the last claim
   * left jobs behind (otherwise NOTIFY or the poll will wake us).
   */
  slotFreed(durationMs?: number): void {
    if (durationMs !== undefined) this.prefetch.record(durationMs);
    if (this.slotWanted && !this.state.stopping) {
      // The claim round runs first; whatever slot it leaves free goes to prefetched jobs after it.
      void this.wake().then(() => this.startPrefetched());
      return;
    }
    this.startPrefetched();
    if (this.limitReached && !this.state.stopping) this.wakeForFreedSlots();
    else if (durationMs !== undefined && (this.moreMayBeWaiting || this.slotWanted) && this.state.prefetched.length <= this.prefetch.target / 2) void this.wake();
  }

  /** Jobs of a limited task that end together (in one turn of the event loop) wake one claim for all their slots, not one each. */
  private wakeForFreedSlots(): void {
    if (this.freedSlotsWake) return;
    this.freedSlotsWake = setImmediate(() => {
      this.freedSlotsWake = undefined;
      void this.wake();
    });
  }

  /** Starts prefetched jobs while slots are free, in the order they were claimed (a leased task's beyond its lease wait: slot-leases.ts). */
  startPrefetched(): void {
    const { state } = this;
    // Past workerTimeout without a heartbeat (a stall), these jobs may have been rescued and run elsewhere: beat first.
    if (state.prefetched.length > 0 && this.membership.mayBeDeclaredDead) return this.membership.beatNow();
    this.paused.takePaused();
    const startable = this.leases.startable();
    while (state.busySlots < state.concurrency && state.prefetched.length > 0 && !state.stopping) {
      const index = startable ? state.prefetched.findIndex((job) => startable(job.taskIdentifier)) : 0;
      if (index < 0) break;
      this.launch(index === 0 ? state.prefetched.shift()! : state.prefetched.splice(index, 1)[0]);
    }
  }

  /** After a heartbeat: a claim whose reply was lost leaves rows to give back. */
  afterHeartbeat(): void {
    if (this.claimReplyLost && !this.state.stopping) this.serialize(() => this.giveBackUnknown());
    if (!this.state.stopping) this.serialize(() => this.leases.trim(this.membership.workerId));
    this.paused.retry(); // jobs of a pause whose give-back found their row locked, or failed
    this.startPrefetched(); // held back while this worker could not prove itself alive
  }

  /**
   * Claims jobs until the free slots and the prefetch room are full, or until the table has
   * nothing more for us. Returns how many it claimed.
   */
  private async fetchCycle(): Promise<number> {
    const { state } = this;
    const { controls } = this;
    let total = 0;
    let named = this.wakeUps.take(this.moreMayBeWaiting); // the jobs NOTIFYs named, to claim alone, or undefined
    while (!state.stopping) {
      // Told of a pause (or polling) since the last claim: read them first, so no claim that begins after the notification takes a paused job.
      if (controls.isStale) await controls.fresh();
      this.paused.takePaused(); // and hold none of their jobs claimed ahead
      // Limited tasks (globalConcurrency, rateLimit) leave the general claim, as paused ones do, for claims of their own.
      const { unlimited, limited } = this.limits.split(controls.claimTasks(this.tasks.identifiers()));
      if ((unlimited.length === 0 && limited.length === 0) || state.stopping) break;
      const free = Math.max(0, state.concurrency - state.busySlots);
      // Backpressure: what this worker holds, releases not yet written included, stays under maxHeld.
      const headroom = maxHeld(state.concurrency) - (state.busySlots + state.prefetched.length + state.batcher.unwritten);
      this.heldBack = headroom <= 0;
      // A rate-limited task waiting for a slot gets the free ones, even past a full prefetch.
      const room = Math.min(headroom, Math.max(this.slotWanted ? free : 0, free + this.prefetch.target - state.prefetched.length));
      if (room <= 0) {
        // Woken with no room (a NOTIFY while every slot is busy and nothing is to be
        // prefetched): the job that woke us waits in the table, so the next free slot claims.
        this.moreMayBeWaiting = true;
        break;
      }
      const claimedAs = this.membership.workerId;
      let rows: ClaimedRow[] = [];
      let more = false;
      this.claiming = true;
      try {
        const args: ClaimArgs = { forbidden: await this.forbiddenFlags(), room, workerId: claimedAs, free, pausedQueues: controls.queues };
        // Whichever claim goes first may fill the room: with both kinds of task, they take
        // turns at going first, so that neither starves while the other keeps the slots full.
        this.limitedFirst = limited.length > 0 && unlimited.length > 0 && (this.slotWanted || !this.limitedFirst);
        const general = () => this.claimUnlimited(unlimited, rows, args, named);
        const limits = () => this.claimLimitedTasks(limited, rows, args); // with none, notes that no limit is reached
        for (const claim of this.limitedFirst ? [limits, general] : [general, limits]) more = (await claim()) || more;
        this.claimFailures = 0;
      } catch (error) {
        // The server may have committed the claim before the reply was lost: the next
        // heartbeat gives back what is locked for us that we do not know.
        this.claimReplyLost = true;
        this.claimFailures += 1;
        this.events.reportError(this.membership.workerId, 'claim', error);
        clearTimeout(this.retryTimer);
        this.retryTimer = setTimeout(() => void this.wake(), backoffMs(this.claimFailures));
        break;
      } finally {
        this.claiming = false;
      }
      // Claimed while stop() began: given back by stop(). Claimed under an id fenced since: the sweep's orphan rule frees them.
      if (state.stopping || claimedAs !== this.membership.workerId) break;
      // The ones the claim marked started go first: they were claimed for the free slots. A job
      // this process already runs or holds is not started twice: its claim was lost in a server
      // crash (claims do not wait for the disk) and this worker claimed it again.
      const held = new Map(state.prefetched.map((job, index) => [job.id, index]));
      const jobs = rows.map((row) => toClaimedJob(row, claimedAs)).filter((job) => !this.claimedAgain(job, held));
      state.prefetched.unshift(...jobs.filter((job) => job.startedAt !== null));
      state.prefetched.push(...jobs.filter((job) => job.startedAt === null));
      this.startPrefetched();
      total += rows.length;
      this.moreMayBeWaiting = more || this.refillWanted;
      if (!named && !this.moreMayBeWaiting) this.wakeUps.drained();
      named = undefined; // a claim round that filled what it asked for goes on with the general claim
      if (!more) break;
    }
    return total;
  }

  /**
   * The general claim (sql claimJobs) of the tasks without a limit, into what is left of the
   * room, appended to `rows`; or, given `named`, the claim of those jobs alone (claimJobsById).
   * Returns whether it filled what it asked for.
   */
  private async claimUnlimited(unlimited: string[], rows: ClaimedRow[], args: ClaimArgs, named?: string[]): Promise<boolean> {
    const room = args.room - rows.length;
    if (unlimited.length === 0) return false;
    if (room <= 0) return true;
    const free = Math.max(0, args.free - rows.length);
    const claimed = await this.claims.run((client) =>
      named
        ? this.db.runOn<ClaimedRow>(client, 'claimJobsById', [unlimited, args.forbidden, room, args.workerId, free, named])
        : this.db.runOn<ClaimedRow>(client, 'claimJobs', [unlimited, args.forbidden, room, args.workerId, free, args.pausedQueues]),
    );
    rows.push(...claimed);
    // Fewer candidates than asked for: the table has nothing more for us right now.
    return claimed.length > 0 && claimed[0].candidate_count >= room;
  }

  /**
   * A job this worker runs or holds, claimed again (its first claim was lost in a server
   * crash): not started twice, but its release must name the new claim, the one its row holds.
   */
  private claimedAgain(job: Job, held: Map<string, number>): boolean {
    const running = this.state.running.get(job.id);
    if (running) running.claim = claimOf(job);
    const index = held.get(job.id);
    if (index !== undefined) this.state.prefetched[index] = job;
    return running !== undefined || index !== undefined;
  }

  /**
   * Claims each limited task's jobs (limited-claim.ts) into what the general claim left of the
   * room, appending them to `rows`; returns whether one of them filled what it asked for
   * within its limits (more may be waiting). Notes whether a concurrency limit was reached or a
   * rate-limited task waits for a slot, and wakes the fetch when the first rate window that is
   * full has room again.
   */
  private async claimLimitedTasks(limited: string[], rows: ClaimedRow[], args: ClaimArgs): Promise<boolean> {
    await this.leases.dropUnless((task) => isLeased(this.limits.limitsOf(task)), args.workerId);
    // Counted claims do not count this worker's finished jobs whose release is on its way: read once, when one is made.
    let unwritten: string[] | undefined;
    let more = false;
    let refill = false;
    let reached = false;
    let wanted = false;
    let nextRoomInMs = Infinity;
    for (const task of limited) {
      const room = args.room - rows.length;
      if (room <= 0) {
        more = true;
        break;
      }
      const free = Math.max(0, args.free - rows.length);
      // A rate-limited task starts only into free slots: with none, it waits for one.
      const limits = this.limits.limitsOf(task);
      if (free === 0 && limits && isRated(limits)) {
        wanted = true;
        continue;
      }
      const declared = this.limits.declaredOf(task);
      const claimed = isLeased(limits)
        ? await this.leases.claim(task, declared, limits.concurrency, { ...args, room, free })
        : await claimLimited(this.db, this.claims, task, declared, this.controls.overrideOf(task), { ...args, room, free, unwritten: (unwritten ??= this.state.batcher.unwrittenIds()) });
      rows.push(...claimed.rows);
      more ||= claimed.more;
      refill ||= claimed.refill === true;
      reached ||= claimed.capped;
      wanted ||= claimed.wantsSlot;
      if (claimed.rateFreesInMs !== undefined) nextRoomInMs = Math.min(nextRoomInMs, claimed.rateFreesInMs);
    }
    this.limitReached = reached;
    this.slotWanted = wanted;
    this.refillWanted = refill;
    if (nextRoomInMs !== Infinity) {
      clearTimeout(this.rateTimer);
      this.rateTimer = setTimeout(() => void this.wake(), timerDelay(nextRoomInMs));
    }
    return more;
  }

  private async forbiddenFlags(): Promise<string[]> {
    const option = this.options.forbiddenFlags;
    if (!option) return [];
    return typeof option === 'function' ? await option() : option;
  }

  /**
   * After a claim whose reply was lost (the server may have committed it), gives back the
   * jobs locked for this worker that it does not know of. Runs in the fetch chain.
   */
  private async giveBackUnknown(): Promise<void> {
    // An insert in flight may have committed a job locked for us whose reply has not come:
    // left for the next heartbeat (local slots keep no new slot meanwhile).
    if (!this.claimReplyLost || this.state.stopping || this.state.keptSlots.size > 0) return;
    try {
      const { givenBack, busy } = await giveBackOnce(this.parts(), this.state.heldIds());
      this.claimReplyLost = busy > 0; // a row someone has locked: try again at the next heartbeat
      if (givenBack.length > 0) this.logger.warn(`Gave back ${givenBack.length} job(s) claimed by a claim whose reply was lost: ${givenBack.join(', ')}`);
    } catch (error) {
      this.events.reportError(this.membership.workerId, 'give-back', error);
    }
  }

  /** Gives back every job this worker holds except `keep` (give-back.ts); returns their ids. */
  giveBack(keep: string[]): Promise<string[]> {
    return giveBackAllBut(this.parts(), keep);
  }
}
