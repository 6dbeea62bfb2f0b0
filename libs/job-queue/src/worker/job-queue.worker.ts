import {
  Injectable,
  Logger,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { AsyncResource } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { QueryResultRow } from 'pg';
import { Subject, type Observable } from 'rxjs';
import type { EntityManager } from 'typeorm';
import type { JobContext } from '../decorators/job-context';
import { TaskRegistry, type RegisteredTask } from '../decorators/task-registry';
import { JobQueueError } from '../errors';
import { progressToJson, toJsonText } from '../json';
import { JobQueueDatabase, type Statement } from '../module/job-queue-database';
import type { Job } from '../service/job';
import { toClaimedJob, type ClaimedRow } from './claimed-job';
import { JobQueueService } from '../service/job-queue.service';
import { LocalStart, type LocalSlot } from '../service/local-start';
import { JobQueueTelemetry } from '../telemetry/job-queue-telemetry';
import { backoffMs, sleep } from '../backoff';
import type { JobQueueEvent } from './events';
import { NotifyListener } from '../module/notify-listener';
import { poolSizeWarning } from '../module/pool-size';
import { maxHeld, PrefetchSizer } from './prefetch';
import { ReleaseBatcher } from './release-batcher';
import { writeReleases } from './release-parameters';
import { defaultRetryDelayMs } from './retry-delay';
import { PermanentJobError, SnoozeJob } from './handler-outcomes';
import { WorkerAttemptContext } from './attempt-context';
import { ClaimConnection } from './claim-connection';
import { JobClsContext } from './job-cls-context';
import { runAttempt } from './job-transaction';
import { errorCode, errorMessage, type JobOutcome } from './run-job';
import { RunningJob } from './running-job';

/** How long a transactional attempt's completion waits for the job's row lock (a caller's add_job holding it) before the attempt fails. */
const COMPLETION_LOCK_TIMEOUT_MS = 1_000;

/** How often a give-back retries rows someone else has locked (after 4, 16, 64, then 100 ms each: about 1 s). */
const GIVE_BACK_BUSY_TRIES = 12;

const newWorkerId = () => `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;

/**
 * The worker: claims jobs of the tasks this process knows, runs up to `concurrency` of them
 * at once, and releases them in batches. It wakes on NOTIFY, polls every `pollInterval`, and
 * starts with the app (unless `worker: false`) and drains in Nest's shutdown hooks.
 *
 * Data path: wake() → fetchCycle() claims a batch (sql claimJobs) → launch() runs each
 * handler (run-job.ts) → settle() hands the outcome to the ReleaseBatcher (sql releaseJobs).
 *
 * Liveness: the worker's row in `workers` gets a heartbeat every `heartbeatInterval`, on the
 * worker's pinned connection. If the row is gone, the cluster declared this worker dead and
 * gave its jobs to others: it drops them unwritten and rejoins under a new id (fence()).
 */
/** What JobQueueWorker.status() reports. */
export interface WorkerStatus {
  /** Started and not stopping. */
  running: boolean;
  /** Its LISTEN connection is up (it hears new jobs and cancels at once). */
  listening: boolean;
  /** Its row exists as far as it knows (false while it rejoins after being declared dead). */
  registered: boolean;
  /** Its last successful heartbeat (or registration). */
  lastHeartbeatAt: Date | null;
  runningJobs: number;
}

@Injectable()
export class JobQueueWorker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private id = newWorkerId();
  private readonly logger = new Logger('JobQueueWorker');
  private readonly events = new Subject<JobQueueEvent>();
  /** Every event of this worker: jobs starting, succeeding, failing; the worker starting, stopping, erring. */
  readonly events$: Observable<JobQueueEvent> = this.events.asObservable();

  private readonly running = new Map<string, RunningJob>();
  /** Handlers of jobs this worker lost (fenced) that have not settled yet: they still take a slot. */
  private readonly lostRunning = new Set<RunningJob>();
  /** Claimed (locked for this worker) but not started yet: see prefetch.ts. */
  private readonly prefetched: Job[] = [];
  private readonly prefetch: PrefetchSizer;
  /** The connection claims run on (claim-connection.ts). */
  private readonly claims: ClaimConnection;
  private batcher: ReleaseBatcher;
  private listener?: NotifyListener;
  private pollTimer?: NodeJS.Timeout;
  private heartbeatTimer?: NodeJS.Timeout;
  private retryTimer?: NodeJS.Timeout;
  private fetchChain: Promise<number> = Promise.resolve(0);
  private wakeQueued = false;
  private claimFailures = 0;
  /** A claim, or an insert that claims at its add (keepSlot), failed after the server may have committed it: rows may be locked for us that we do not know. */
  private claimReplyLost = false;
  /** A claim is on its way: it marks jobs started for the slots that were free when it began (keepSlot leaves them). */
  private claiming = false;
  /** The last claim found as many candidates as it asked for: more jobs may be waiting. */
  private moreMayBeWaiting = false;
  /** The last fetch claimed nothing because the worker holds too many unwritten releases: the next written flush wakes it. */
  private heldBack = false;
  private registered = false;
  /** When the worker's row last proved it alive (registration or heartbeat), epoch ms. */
  private lastHeartbeatAt?: number;
  /** Fenced, and not registered under its new id yet. */
  private rejoining = false;
  private started = false;
  private stopping = false;
  /** runUntilIdle() calls under way. */
  private idleRuns = 0;
  /** One per slot kept for a job this process is adding (keepSlot), settled when its insert returns: stop() waits for them. */
  private readonly keptSlots = new Set<Promise<void>>();
  /** The async context start() ran in, which claimed jobs inherit from its timers and listener: jobs started at their add run in it too. */
  private ownScope = new AsyncResource('nestjs-job-queue worker');

  constructor(
    private readonly db: JobQueueDatabase,
    private readonly tasks: TaskRegistry,
    private readonly jobs: JobQueueService,
    private readonly telemetry: JobQueueTelemetry,
    private readonly clsContext: JobClsContext,
    private readonly localStart: LocalStart,
  ) {
    this.prefetch = new PrefetchSizer(() => this.db.options.concurrency); // known once the pool is (onModuleInit)
    this.claims = new ClaimConnection(() => this.db.pool);
    this.batcher = this.createBatcher();
  }

  /** This worker's id in the `workers` table and in `locked_by`. It changes if the worker is fenced and rejoins. */
  get workerId(): string {
    return this.id;
  }

  /**
   * Takes a new worker id, and a release batcher bound to it, so that nothing claimed under
   * the old id is ever written under the new one. Returns the old id's batcher.
   */
  private takeNewId(): ReleaseBatcher {
    const old = this.batcher;
    this.id = newWorkerId();
    this.batcher = this.createBatcher();
    return old;
  }

  /**
   * Releases for the current worker id only: after a fence, a new batcher is made for the
   * new id, so that nothing claimed under the old one is written under the new one. A flush
   * that frees a named queue notifies every worker (this one too), so it needs no wake-up.
   */
  private createBatcher(): ReleaseBatcher {
    const workerId = this.id;
    return new ReleaseBatcher(
      writeReleases(this.db, workerId, this.keepsCompleted),
      (error) => this.reportError('release', error),
      (cancelled) => {
        for (const { id, reason } of cancelled) this.emit({ type: 'job:cancelled', jobId: id, reason });
      },
      // A fetch held back by unwritten releases has room again.
      () => {
        if (this.heldBack) void this.wake();
      },
    );
  }

  /** Whether a completed job is kept in finished_jobs (retention.completed is not 0). */
  private get keepsCompleted(): boolean {
    return this.db.options.retention.completed !== 0;
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.db.options.worker) await this.start();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.stop();
  }

  /** True from the moment stop() begins (the app is shutting down) until the worker has stopped. */
  get isStopping(): boolean {
    return this.stopping && (this.started || this.registered);
  }

  /** Jobs running in this process right now. */
  get runningCount(): number {
    return this.running.size;
  }

  /** For health checks: whether this worker runs, hears notifications, and proves itself alive. */
  status(): WorkerStatus {
    return {
      running: this.started && !this.stopping,
      listening: this.listener?.connection !== undefined,
      registered: this.registered && !this.rejoining,
      lastHeartbeatAt: this.lastHeartbeatAt === undefined ? null : new Date(this.lastHeartbeatAt),
      runningJobs: this.running.size,
    };
  }

  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    this.stopping = false;
    this.ownScope = new AsyncResource('nestjs-job-queue worker');
    this.listener = new NotifyListener(
      this.db.pool,
      [this.db.sql.channel, this.db.sql.cancelChannel],
      (channel, payload) => (channel === this.db.sql.cancelChannel ? this.heardCancel([payload ?? '']) : void this.wake()),
      (error) => this.reportError('listen', error),
    );
    await this.listener.start();
    await this.register();
    // The listener's first wake-up may have claimed before the row existed (claims need it), and found nothing.
    void this.wake();
    this.pollTimer = setInterval(() => void this.wake(), this.db.options.pollInterval);
    if (this.db.options.localStart) this.localStart.offer(this);
    this.logger.log(
      `Worker ${this.id} started: concurrency ${this.db.options.concurrency}, tasks ${this.tasks.identifiers().join(', ') || '(none)'}`,
    );
    const poolWarning = poolSizeWarning(this.db.pool.options.max, this.db.options.concurrency);
    if (poolWarning) this.logger.warn(`Worker ${this.id}: ${poolWarning}`);
    this.emit({ type: 'worker:start', workerId: this.id });
  }

  /** Inserts this worker's row (claims require it) and starts its heartbeats. */
  private async register(): Promise<void> {
    await this.runPinned('registerWorker', [this.id, this.db.options.workerTimeout, hostname(), process.pid, this.db.options.concurrency]);
    this.registered = true;
    this.lastHeartbeatAt = Date.now();
    clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), this.db.options.heartbeatInterval);
  }

  private async unregister(): Promise<void> {
    clearInterval(this.heartbeatTimer);
    this.registered = false;
    await this.runPinned('unregisterWorker', [this.id]).catch(() => undefined);
  }

  /**
   * Proves this worker alive, on the database's clock. No row back: the cluster declared it
   * dead. After a claim whose reply was lost, also gives back what it holds unknowingly.
   */
  private async heartbeat(): Promise<void> {
    if (this.rejoining) {
      this.fetchChain = this.fetchChain.then(() => this.rejoin());
      return;
    }
    const id = this.id;
    try {
      const rows = await this.runPinned<{ cancelled: string[] }>('heartbeatWorker', [id]);
      // Unregistered meanwhile (a stop): the row is gone because this worker removed it.
      if (!this.registered) return;
      if (rows.length === 0 && id === this.id) {
        this.fence(id);
        return;
      }
      if (rows[0] && id === this.id) {
        this.lastHeartbeatAt = Date.now();
        this.heardCancel(rows[0].cancelled);
      }
      if (this.claimReplyLost && !this.stopping) {
        this.fetchChain = this.fetchChain.then(() => this.giveBackUnknown());
      }
    } catch (error) {
      this.reportError('heartbeat', error);
    }
  }

  /**
   * Runs a statement on the worker's pinned connection (the LISTEN one), which handlers
   * cannot take from it; on the pool while that connection is being re-established.
   */
  async runPinned<Row extends QueryResultRow = QueryResultRow>(statement: Statement, values: unknown[]): Promise<Row[]> {
    return this.db.runOn<Row>(this.listener?.connection ?? this.db.pool, statement, values);
  }

  /**
   * Cancels of jobs this worker may hold (by NOTIFY, or found at a heartbeat): a running
   * handler is aborted with JQ_JOB_CANCELLED, a prefetched job is dropped unstarted. Either
   * way the release writes the job cancelled: its row says the cancel was requested.
   */
  private heardCancel(ids: string[]): void {
    for (const id of ids) {
      const entry = this.running.get(id);
      if (entry && !entry.cancelled) {
        entry.cancel();
        this.logger.log(`Job ${id} (${entry.job.taskIdentifier}) was cancelled: its handler's signal is aborted`);
        continue;
      }
      const index = this.prefetched.findIndex((job) => job.id === id);
      if (index >= 0) {
        this.prefetched.splice(index, 1);
        this.batcher.fail({ id, error: `JQ_JOB_CANCELLED: job ${id} was cancelled before it started`, code: 'JQ_JOB_CANCELLED', delayMs: 0 });
      }
    }
  }

  /**
   * The cluster declared this worker dead: the jobs it held were given to others (or will be,
   * by the orphan rule). At once, before anything else can start one of them: it stops the
   * handlers, forgets its prefetched jobs, and takes a new id and a new release batcher, so
   * that nothing claimed under the old id is ever written under the new one (a claim in
   * flight is dropped when it returns: its id is stale). Then it registers again, in the
   * fetch chain.
   */
  private fence(oldId: string): void {
    if (oldId !== this.id || !this.registered) return;
    const lostJobs = [...this.running.keys(), ...this.prefetched.map((job) => job.id)];
    for (const entry of this.running.values()) {
      entry.lost = true;
      this.lostRunning.add(entry);
      entry.stop(new JobQueueError('JQ_WORKER_LOST', `worker ${oldId} was declared dead; job ${entry.job.id} now belongs to another worker`));
    }
    this.running.clear();
    this.prefetched.length = 0;
    const oldBatcher = this.takeNewId();
    this.registered = false; // until register() below: heartbeats meanwhile find no row, and that is expected
    void oldBatcher.stop(); // writes nothing that matters: every row it names is locked by someone else now
    this.logger.error(
      `Worker ${oldId} was declared dead by the cluster (no heartbeat for ${this.db.options.workerTimeout} ms: a stall or a lost connection). ` +
        `Its ${lostJobs.length} job(s) were given to other workers; it writes no outcome for them and aborted their handlers` +
        `${lostJobs.length ? ` (${lostJobs.join(', ')})` : ''}. Rejoining as ${this.id}.`,
    );
    this.emit({ type: 'worker:fenced', workerId: oldId, newWorkerId: this.id, lostJobs });
    this.rejoining = true;
    this.fetchChain = this.fetchChain.then(() => this.rejoin());
  }

  /** Registers the new id after a fence; tried again at each heartbeat until it succeeds. */
  private async rejoin(): Promise<number> {
    if (!this.rejoining || this.stopping) return 0;
    try {
      await this.register();
      this.rejoining = false;
    } catch (error) {
      this.reportError('heartbeat', error);
    }
    return 0;
  }

  /**
   * After a claim whose reply was lost (the server may have committed it), gives back the
   * jobs locked for this worker that it does not know of. Runs in the fetch chain.
   */
  private async giveBackUnknown(): Promise<number> {
    // An insert in flight may have committed a job locked for us whose reply has not come:
    // left for the next heartbeat (keepSlot keeps no new slot meanwhile).
    if (!this.claimReplyLost || this.stopping || this.keptSlots.size > 0) return 0;
    try {
      const { givenBack, busy } = await this.giveBackAllBut([...this.running.keys(), ...this.prefetched.map((job) => job.id)]);
      this.claimReplyLost = busy > 0; // a row someone has locked: try again at the next heartbeat
      if (givenBack.length > 0) this.logger.warn(`Gave back ${givenBack.length} job(s) claimed by a claim whose reply was lost: ${givenBack.join(', ')}`);
    } catch (error) {
      this.reportError('give-back', error);
    }
    return 0;
  }

  /**
   * Stops claiming, lets running jobs finish within the grace period, then aborts them and
   * gives back the unfinished ones with their attempt returned. A handler that ignores the
   * abort keeps its job locked (nothing may run it twice), and this worker keeps
   * heartbeating until it settles or the process exits (then the sweep frees the job).
   */
  async stop(): Promise<void> {
    // A producer-only app (worker: false) may still be running jobs through runUntilIdle().
    const busy = this.running.size > 0 || this.prefetched.length > 0;
    if (this.stopping || (!this.started && !busy && !this.registered)) return this.claims.close();
    this.stopping = true;
    clearInterval(this.pollTimer);
    clearTimeout(this.retryTimer);
    this.localStart.offer(undefined);
    await this.fetchChain;
    await Promise.all(this.keptSlots);

    const settled = () => Promise.all([...this.running.values()].map((r) => r.done));
    const graceOver = new AbortController();
    await Promise.race([settled(), sleep(this.db.options.shutdownGracePeriod, graceOver.signal)]);
    if (this.running.size > 0) {
      for (const entry of this.running.values()) entry.stop(new Error('The worker is shutting down'), () => this.reportStuck(entry, 'shutdown'));
      // Handlers that honour the signal settle now and are given back below.
      await Promise.race([settled(), sleep(Math.min(200, this.db.options.shutdownGracePeriod), graceOver.signal)]);
    }
    graceOver.abort(); // no timer left behind to keep the process alive
    // Still running now: kept, from this instant (a success during the flush below is then
    // completed, not given back).
    const kept = [...this.running.values()];
    for (const entry of kept) entry.kept = true;
    // From here on a failing flush is retried a few times only: a database that refuses a
    // release must not hold the shutdown forever (the jobs stay locked, for the sweep).
    this.batcher.retryBriefly();
    await this.batcher.flush();
    this.prefetched.length = 0; // never started: given back below with the unfinished ones
    // Not given back: the kept jobs (and the finished ones whose release is not written yet:
    // batcher.stop() below writes those).
    const givenBack = await this.giveBack(kept.map((entry) => entry.job.id));
    if (kept.length > 0) {
      this.logger.error(
        `${kept.length} handler(s) ignored the abort at shutdown: job(s) ${kept.map((e) => e.job.id).join(', ')} stay locked by ` +
          `${this.id}, which keeps heartbeating until they settle. If the process exits first, another worker retries them once ${this.id} times out.`,
      );
      await Promise.all(kept.map((entry) => entry.done));
    }
    await this.batcher.stop();
    // Left now: releases given up after their tries (the database refused them).
    const unwritten = this.batcher.unwrittenIds();
    if (unwritten.length > 0) {
      this.logger.error(
        `The outcome of ${unwritten.length} finished job(s) could not be written at shutdown: job(s) ${unwritten.join(', ')} stay locked by ` +
          `${this.id}, and another worker runs them again once ${this.id} times out.`,
      );
    }
    this.running.clear();
    await this.claims.close();
    await this.unregister();
    await this.listener?.stop();
    this.started = false;
    const workerId = this.id;
    // A later start() or runUntilIdle() registers under a new id: rows the give-back had to
    // leave (a caller's lock) stay with the old one, for the sweep, and never with a live worker that forgot them.
    this.takeNewId();
    if (givenBack.length > 0) this.logger.warn(`Gave back ${givenBack.length} unfinished job(s): ${givenBack.join(', ')}`);
    this.logger.log(`Worker ${workerId} stopped`);
    this.emit({ type: 'worker:stop', workerId, givenBack });
  }

  /**
   * Runs every job that is available now (including jobs those jobs add) and resolves when
   * none is left and every result is written. For tests and one-off scripts; works with
   * `worker: false` too (the worker then registers for the run, and heartbeats meanwhile).
   */
  async runUntilIdle(): Promise<void> {
    if (this.stopping) return; // stopped or stopping: nothing more runs here
    const ownRegistration = !this.registered;
    this.idleRuns += 1;
    try {
      if (ownRegistration) await this.register();
      await this.runWhileAvailable();
    } finally {
      // A producer-only app keeps no connection for claims once no runUntilIdle() is under way.
      if (--this.idleRuns === 0 && !this.started && !this.stopping) await this.claims.close();
      if (ownRegistration && !this.started && !this.stopping) await this.unregister();
    }
  }

  private async runWhileAvailable(): Promise<void> {
    while (!this.stopping) {
      // Idle only if a claim that began with nothing running, prefetched or unwritten finds
      // nothing: a result written during the claim may have freed a named queue it skipped.
      const settledBefore = this.running.size === 0 && this.prefetched.length === 0 && this.batcher.idle;
      const claimed = await this.wake();
      if (this.running.size > 0) {
        await Promise.race([...this.running.values()].map((r) => r.done));
      } else if (!this.batcher.idle) {
        await this.batcher.flush();
      } else if (settledBefore && claimed === 0) {
        return;
      }
    }
  }

  /** Asks for a fetch; wake-ups that arrive while one is queued share it. */
  private wake(): Promise<number> {
    if (this.wakeQueued) return this.fetchChain;
    this.wakeQueued = true;
    this.fetchChain = this.fetchChain.then(() => {
      this.wakeQueued = false;
      return this.fetchCycle();
    });
    return this.fetchChain;
  }

  /** Slots taken: running handlers, including lost ones that have not settled, and slots kept for jobs being added. */
  private get busySlots(): number {
    return this.running.size + this.lostRunning.size + this.keptSlots.size;
  }

  /**
   * A slot for a job this process is adding (service/local-start.ts): given only while this
   * worker runs its task, may take its flags, has a free slot and room under maxHeld, and
   * holds no claimed job waiting nor knows of more in the table, nor claims (those go first).
   */
  keepSlot(task: string, flags: readonly string[]): LocalSlot | undefined {
    if (!this.started || this.stopping || !this.registered || this.rejoining || !this.tasks.get(task)) return undefined;
    if (this.prefetched.length > 0 || this.moreMayBeWaiting || this.busySlots >= this.db.options.concurrency) return undefined;
    // A give-back of the rows locked for us that we do not know is due: it must not take the job of an insert in flight.
    if (this.claimReplyLost) return undefined;
    // A claim on its way marks jobs started for the slots that were free when it began: they are theirs.
    if (this.claiming) return undefined;
    if (this.busySlots + this.batcher.unwritten >= maxHeld(this.db.options.concurrency)) return undefined;
    if (flags.length > 0) {
      const forbidden = this.db.options.forbiddenFlags;
      // A function may answer differently by now: such a job goes through a claim, which asks it.
      if (typeof forbidden === 'function' || forbidden?.some((flag) => flags.includes(flag))) return undefined;
    }
    const workerId = this.id;
    let settle!: () => void;
    const settled = new Promise<void>((resolve) => (settle = resolve));
    this.keptSlots.add(settled);
    const giveUp = () => {
      this.keptSlots.delete(settled);
      settle();
    };
    const free = () => {
      giveUp();
      // Called in the adding caller's async context: the jobs it starts run in the worker's own.
      this.ownScope.runInAsyncScope(() => this.startPrefetched());
    };
    return {
      workerId,
      start: (job) => {
        giveUp();
        // Fenced meanwhile: the job is locked by the old id, and the sweep's orphan rule frees it.
        if (workerId !== this.id) return;
        // Stopping: stop() waited for this insert, and gives the job back with the prefetched ones.
        if (this.stopping) this.prefetched.push(job);
        // Out of the adding caller's async context (its request's CLS, its active span), as a
        // claimed job runs: in the worker's own, from its start().
        else this.ownScope.runInAsyncScope(() => this.launch(job));
      },
      free,
      failed: () => {
        // Given back at the next heartbeat if it committed (giveBackUnknown), as a claim whose reply was lost.
        if (workerId === this.id) this.claimReplyLost = true;
        free();
      },
    };
  }

  /**
   * Claims jobs until the free slots and the prefetch room are full, or until the table has
   * nothing more for us. Returns how many it claimed.
   */
  private async fetchCycle(): Promise<number> {
    const identifiers = this.tasks.identifiers();
    let total = 0;
    while (!this.stopping && identifiers.length > 0) {
      const free = Math.max(0, this.db.options.concurrency - this.busySlots);
      // Backpressure: what this worker holds, releases not yet written included, stays under maxHeld.
      const headroom = maxHeld(this.db.options.concurrency) - (this.busySlots + this.prefetched.length + this.batcher.unwritten);
      this.heldBack = headroom <= 0;
      const room = Math.min(headroom, free + this.prefetch.target - this.prefetched.length);
      if (room <= 0) {
        // Woken with no room (a NOTIFY while every slot is busy and nothing is to be
        // prefetched): the job that woke us waits in the table, so the next free slot claims.
        this.moreMayBeWaiting = true;
        break;
      }
      const claimedAs = this.id;
      let rows: ClaimedRow[];
      this.claiming = true;
      try {
        const forbidden = await this.forbiddenFlags();
        rows = await this.claims.run((client) => this.db.runOn(client, 'claimJobs', [identifiers, forbidden, room, claimedAs, free]));
        this.claimFailures = 0;
      } catch (error) {
        // The server may have committed the claim before the reply was lost: the next
        // heartbeat gives back what is locked for us that we do not know.
        this.claimReplyLost = true;
        this.claimFailures += 1;
        this.reportError('claim', error);
        clearTimeout(this.retryTimer);
        this.retryTimer = setTimeout(() => void this.wake(), backoffMs(this.claimFailures));
        break;
      } finally {
        this.claiming = false;
      }
      // Claimed while stop() began: given back by stop(). Claimed under an id fenced since: the sweep's orphan rule frees them.
      if (this.stopping || claimedAs !== this.id) break;
      // The ones the claim marked started go first: they were claimed for the free slots. A job
      // this process already runs or holds is not started twice: its claim was lost in a server
      // crash (claims do not wait for the disk) and this worker claimed it again.
      const held = new Set(this.prefetched.map((job) => job.id));
      const jobs = rows.map((row) => toClaimedJob(row, claimedAs)).filter((job) => !this.running.has(job.id) && !held.has(job.id));
      this.prefetched.unshift(...jobs.filter((job) => job.startedAt !== null));
      this.prefetched.push(...jobs.filter((job) => job.startedAt === null));
      this.startPrefetched();
      total += rows.length;
      // Fewer candidates than asked for: the table has nothing more for us right now.
      this.moreMayBeWaiting = rows.length > 0 && rows[0].candidate_count >= room;
      if (!this.moreMayBeWaiting) break;
    }
    return total;
  }

  private async forbiddenFlags(): Promise<string[]> {
    const option = this.db.options.forbiddenFlags;
    if (!option) return [];
    return typeof option === 'function' ? await option() : option;
  }

  /** Starts prefetched jobs while slots are free, in the order they were claimed. */
  private startPrefetched(): void {
    while (this.busySlots < this.db.options.concurrency && this.prefetched.length > 0 && !this.stopping) {
      this.launch(this.prefetched.shift()!);
    }
  }

  /** Every handler's ctx.addJob (one for all: it only passes the call on). */
  private readonly addJob = ((identifier, ...args) => this.jobs.add(identifier, ...args)) as JobContext['addJob'];

  private launch(job: Job): void {
    const task = this.tasks.get(job.taskIdentifier)!;
    const entry = new RunningJob(job);
    if (job.startedAt === null) this.batcher.markStarted(job.id);
    const timeoutMs = task.timeoutMs ?? this.db.options.jobTimeout;
    if (timeoutMs !== undefined) entry.setTimeout(timeoutMs, (reason) => this.reportStuck(entry, reason));
    if (this.heard) this.emit({ type: 'job:start', job });
    const progress = (value: Parameters<typeof progressToJson>[0]) => {
      const json = progressToJson(value);
      if (entry.lost || entry.isSettled) return; // stray calls after the handler returned: its outcome has the last word
      this.emit({ type: 'job:progress', job, progress: JSON.parse(json) });
      entry.reportProgress(json, (written) => this.batcher.reportProgress(job.id, written));
    };
    const context = new WorkerAttemptContext(entry, this.addJob, progress, this.db.options.middleware);
    const workerId = this.id;
    const attempt = () =>
      runAttempt(task, job, context, this.db.dataSource, (manager, result) => this.completeInTransaction(manager, workerId, entry, result));
    entry.done = this.telemetry.traceAttempt(job, () => this.clsContext.run(attempt)).then(
      (outcome) => {
        entry.settled();
        const committed = outcome.ok && outcome.completedInTransaction === true;
        if (entry.lost) {
          this.lostRunning.delete(entry);
          this.logger.warn(
            `Job ${job.id} (${job.taskIdentifier}) settled after this worker lost it; ` +
              (committed ? 'its transaction had completed it before the loss' : 'its outcome was not written'),
          );
          this.startPrefetched();
          return;
        }
        // Given back at shutdown (and perhaps claimed again since): no longer this run's to release.
        if (this.running.get(job.id) !== entry) return;
        this.running.delete(job.id);
        try {
          // A timeout that fires after the transaction committed comes too late to undo it.
          this.settle(task, entry, entry.timedOut && !committed ? { ok: false, error: entry.timedOut } : outcome);
        } finally {
          // Hand the free slot on in this same step, so that no one (runUntilIdle) sees it empty
          // while prefetched jobs wait; claim ahead if the last claim left jobs behind
          // (otherwise NOTIFY or the poll will wake us).
          this.startPrefetched();
          if (this.moreMayBeWaiting && this.prefetched.length <= this.prefetch.target / 2) void this.wake();
        }
      },
    );
    this.running.set(job.id, entry);
  }

  private reportStuck(entry: RunningJob, reason: 'timeout' | 'shutdown'): void {
    const { job } = entry;
    this.logger.error(
      `Job ${job.id} (${job.taskIdentifier}) is stuck: its handler ignores the aborted signal (${reason}). ` +
        `The job stays locked by ${this.id}, and its slot taken, until the handler settles.`,
    );
    this.emit({ type: 'job:stuck', job, reason, runningMs: entry.durationMs });
  }

  /**
   * The completion of a `transaction: true` attempt, written in its transaction (sql
   * completeJobInTransaction) just before the commit. Throws, which rolls the transaction
   * back, when the job timed out, was cancelled or lost meanwhile.
   */
  private async completeInTransaction(manager: EntityManager, workerId: string, entry: RunningJob, result: unknown): Promise<void> {
    const { job } = entry;
    const stopped = entry.timedOut ?? entry.cancelled;
    if (stopped) throw stopped;
    const lost = () =>
      new JobQueueError(
        'JQ_WORKER_LOST',
        `job ${job.id} (${job.taskIdentifier}) is no longer held by worker ${workerId} (rescued after a stall, or cancelled): its transaction was rolled back`,
      );
    if (entry.lost) throw lost();
    const progress = entry.unwrittenProgress ?? this.batcher.unwrittenProgress(job.id) ?? null;
    const resultJson = this.resultJson(job, result);
    // A caller may hold the job's row (add_job replacing a keyed job) as long as its transaction
    // lasts: rather than wait, holding the handler's locks, the attempt fails and is retried.
    await manager.query(`select set_config('lock_timeout', $1, true)`, [`${COMPLETION_LOCK_TIMEOUT_MS}ms`]);
    const [row] = await this.db.run<{ completed: number; cancelled: boolean }>(
      'completeJobInTransaction',
      [workerId, job.id, resultJson, progress, this.keepsCompleted],
      manager,
    );
    if (row?.completed === 1) return;
    if (row?.cancelled) {
      entry.cancel(); // a cancel its NOTIFY has not brought yet: the job ends cancelled
      throw entry.cancelled;
    }
    throw lost();
  }

  /** Hands a finished run's outcome to the release batcher and reports it. */
  private settle(task: RegisteredTask, entry: RunningJob, outcome: JobOutcome): void {
    const { job } = entry;
    const durationMs = entry.durationMs;
    const progress = entry.unwrittenProgress;
    this.prefetch.record(durationMs);
    if (outcome.ok && outcome.completedInTransaction) {
      // Completed by its own transaction: nothing is left for the batcher to write.
      this.batcher.forget(job.id);
      this.emit({ type: 'job:success', job, result: outcome.result, durationMs });
      this.emit({ type: 'job:complete', job });
      return;
    }
    if (entry.cancelled) {
      // Cancelled: the release writes it so (its row says the cancel was requested), whatever the handler did.
      this.batcher.fail({ id: job.id, error: entry.cancelled.message, code: 'JQ_JOB_CANCELLED', delayMs: 0, progress });
      this.emit({ type: 'job:complete', job, error: entry.cancelled });
      return;
    }
    if (outcome.ok) {
      try {
        const result = this.resultJson(job, outcome.result);
        this.batcher.complete({ id: job.id, result, progress });
        if (this.heard) {
          this.emit({ type: 'job:success', job, result: outcome.result, durationMs });
          this.emit({ type: 'job:complete', job });
        }
        return;
      } catch (error) {
        outcome = { ok: false, error }; // a result that cannot be stored fails the attempt
      }
    }
    const { error } = outcome;
    // Aborted by the shutdown and settled in time: not the job's fault; stop() gives it back
    // with the attempt returned. (One kept past the give-back counts as it ended.)
    if (this.stopping && entry.aborted && !entry.timedOut && !entry.kept) return;
    const message = errorMessage(error);
    if (error instanceof SnoozeJob) {
      this.batcher.fail({ id: job.id, error: message, code: error.code, delayMs: error.delayMs, progress });
      this.emit({ type: 'job:snoozed', job, until: new Date(Date.now() + error.delayMs), durationMs });
      this.emit({ type: 'job:complete', job, error });
      return;
    }
    const forGood = error instanceof PermanentJobError;
    const delayMs = forGood ? 0 : this.retryDelay(task.options.retryDelay, job.attempts, error);
    this.batcher.fail({ id: job.id, error: message, code: errorCode(error), delayMs, progress });
    if (forGood || job.attempts >= job.maxAttempts) {
      this.logger.error(`Job ${job.id} (${job.taskIdentifier}) failed for good after ${job.attempts} attempt(s): ${message}`);
      this.emit({ type: 'job:failed', job, error, durationMs });
    } else {
      const retryAt = new Date(Date.now() + delayMs);
      this.logger.warn(
        `Job ${job.id} (${job.taskIdentifier}) failed attempt ${job.attempts}/${job.maxAttempts}, retrying at ${retryAt.toISOString()}: ${message}`,
      );
      this.emit({ type: 'job:error', job, error, retryAt, durationMs });
      if (job.queueName !== null) this.emit({ type: 'queue:blocked', queueName: job.queueName, job, error, retryAt });
    }
    this.emit({ type: 'job:complete', job, error });
  }

  /** A handler's return value as the JSON text kept with the completed job: null for none. */
  private resultJson(job: Job, result: unknown): string | null {
    if (result === undefined || result === null) return null;
    return toJsonText(result, `the result of job ${job.id} (${job.taskIdentifier})`, this.db.options.maxJsonBytes, {
      notJson: 'JQ_RESULT_NOT_JSON',
      tooLarge: 'JQ_RESULT_TOO_LARGE',
    }, 'null');
  }

  private retryDelay(custom: ((attempts: number, error: unknown) => number) | undefined, attempts: number, error: unknown): number {
    if (!custom) return defaultRetryDelayMs(attempts);
    try {
      const ms = custom(attempts, error);
      return Number.isFinite(ms) && ms >= 0 ? ms : defaultRetryDelayMs(attempts);
    } catch {
      return defaultRetryDelayMs(attempts);
    }
  }

  /**
   * Gives back every job this worker holds except `keep`; returns their ids. A failed
   * statement is retried a few times; rows a caller has locked are tried again for a
   * moment, then left to the maintenance sweep (they are released once this worker's row
   * is gone and workerTimeout has passed), so that a caller's open transaction cannot hold
   * up the shutdown.
   */
  private async giveBack(keep: string[]): Promise<string[]> {
    const givenBack: string[] = [];
    let failures = 0;
    for (let busyTries = 0; ; ) {
      let busy: number;
      try {
        const once = await this.giveBackAllBut(keep);
        givenBack.push(...once.givenBack);
        busy = once.busy;
      } catch (error) {
        this.reportError('give-back', error);
        if (++failures >= 5) return givenBack;
        await sleep(backoffMs(failures));
        continue;
      }
      if (busy === 0) return givenBack;
      if (++busyTries > GIVE_BACK_BUSY_TRIES) {
        this.logger.warn(
          `${busy} job(s) held by ${this.id} are row-locked by another transaction and were not given back; ` +
            `the maintenance sweep releases them once this worker is gone`,
        );
        return givenBack;
      }
      await sleep(Math.min(100, 4 ** busyTries));
    }
  }

  /**
   * One give-back statement: every job this worker holds but `keep`, and but the finished ones
   * whose release the batcher has not written yet (held up by a caller's row lock, say, or in
   * flight): giving those back would run a finished job again. `busy`: rows someone else has
   * locked, left for now.
   */
  private async giveBackAllBut(keep: string[]): Promise<{ givenBack: string[]; busy: number }> {
    const [row] = await this.runPinned<{ given_back: string[]; busy: number }>('giveBackJobs', [this.id, [...keep, ...this.batcher.unwrittenIds()]]);
    return { givenBack: row.given_back, busy: row.busy };
  }

  /** Logs a failed query or connection (the caller retries) and emits it as a worker:error event; the cron scheduler and maintenance report through it too. */
  reportError(during: Extract<JobQueueEvent, { type: 'worker:error' }>['during'], error: unknown): void {
    this.logger.warn(`${during} failed, retrying: ${errorMessage(error)}`);
    this.emit({ type: 'worker:error', workerId: this.id, during, error });
  }

  /**
   * Whether an event reaches anyone: a subscriber of events$ (@OnJobEvent listeners are one),
   * or telemetry's counters. The events every job has (start, success, complete) are built
   * only then: most apps listen to none, and they were three objects per job.
   */
  private get heard(): boolean {
    return this.events.observed || this.telemetry.counting;
  }

  /** Also used by the cron scheduler and maintenance, so that their events join the same stream. */
  emit(event: JobQueueEvent): void {
    this.telemetry.record(event);
    this.events.next(event);
  }
}
