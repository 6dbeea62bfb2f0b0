import { Inject, Injectable, Logger } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { QueryResultRow } from 'pg';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { JobQueueDatabase, type Statement } from '../db/job-queue-database';
import { NotifyListener } from '../db/notify-listener';
import { PinnedConnection } from '../db/pinned-connection';
import { JobQueueEvents } from '../events/job-queue-events';

const newWorkerId = () => `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;

/** What membership asks of the worker it belongs to (job-queue.worker.ts). */
export interface MembershipHooks {
  /** Runs a step in the worker's fetch chain, after the claim under way (producer.ts). */
  serialize(step: () => Promise<unknown>): void;
  /** Cancels of jobs this worker may hold, found at a heartbeat. */
  cancelsHeard(ids: string[]): void;
  /** After a heartbeat that did not find the worker dead. */
  afterHeartbeat(): void;
  /** The cluster declared `oldId` dead: its jobs belong to others now; the worker drops them and goes on under the new id. Returns their ids. */
  fenced(oldId: string): string[];
  stopping(): boolean;
  concurrency(): number;
}

/**
 * The worker's membership of the cluster: its id, its row in `workers` and the heartbeats
 * that keep it, and its pinned connection (the LISTEN one, which handlers cannot take from
 * it), which maintenance and the cron scheduler use too (PinnedConnection).
 *
 * Liveness: the row gets a heartbeat every `heartbeatInterval`. If the row is gone, the
 * cluster declared this worker dead and gave its jobs to others: the worker drops them
 * unwritten and rejoins under a new id (fence()).
 */
@Injectable()
export class WorkerMembership extends PinnedConnection {
  private readonly logger = new Logger('JobQueueWorker');
  private id = newWorkerId();
  private registered = false;
  /**
   * When the worker's row last proved it alive, epoch ms: the sending of its last successful
   * registration or heartbeat, which the row's time (the database's now()) can only follow.
   */
  private lastHeartbeatAt?: number;
  /** The same on the monotonic clock (performance.now()), which a step of the wall clock does not move. */
  private provenAliveAt?: number;
  /** Heartbeats on their way. */
  private beating = 0;
  /** Fenced, and not registered under its new id yet. */
  private rejoining = false;
  private heartbeatTimer?: NodeJS.Timeout;
  private listener?: NotifyListener;
  private hooks?: MembershipHooks;

  constructor(
    private readonly db: JobQueueDatabase,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
    private readonly events: JobQueueEvents,
  ) {
    super();
  }

  /** This worker's id in the `workers` table and in `locked_by`. It changes if the worker is fenced and rejoins. */
  get workerId(): string {
    return this.id;
  }

  /** Its row exists as far as it knows (it may be rejoining under a new id). */
  get isRegistered(): boolean {
    return this.registered;
  }

  /** Registered under its current id: not rejoining after a fence. */
  get isMember(): boolean {
    return this.registered && !this.rejoining;
  }

  get lastHeartbeat(): Date | null {
    return this.lastHeartbeatAt === undefined ? null : new Date(this.lastHeartbeatAt);
  }

  /**
   * The cluster may have declared this worker dead by now: its last proof of life is
   * workerTimeout old (a stall: a long pause, a frozen VM, heartbeats failing). The jobs it
   * claimed may then have been rescued and run elsewhere, so the producer starts none of its
   * prefetched ones until a heartbeat says (beatNow).
   */
  get mayBeDeclaredDead(): boolean {
    return this.provenAliveAt !== undefined && performance.now() - this.provenAliveAt >= this.options.workerTimeout;
  }

  /** A heartbeat now, unless one is on its way (hooks.afterHeartbeat follows one that finds the row). */
  beatNow(): void {
    if (this.beating === 0 && this.registered) void this.heartbeat();
  }

  /** Its LISTEN connection is up. */
  get listening(): boolean {
    return !this.polling && this.listener?.connection !== undefined;
  }

  /**
   * It cannot LISTEN (transactionPooling without listenUrl): it finds new jobs by polling every
   * pollInterval and cancels at its heartbeats, on a pinned connection that listens to nothing.
   */
  get polling(): boolean {
    return !this.db.canListen;
  }

  attach(hooks: MembershipHooks): void {
    this.hooks = hooks;
  }

  /**
   * Opens the pinned connection and LISTENs on the jobs and cancel channels: on the pool, or
   * on listenUrl's direct connections through a pooler; through a pooler without listenUrl it
   * only pins a pooled connection (polling).
   */
  async listen(onNotify: (channel?: string, payload?: string) => void): Promise<void> {
    const listenPool = this.db.listenPool;
    this.listener = new NotifyListener(
      listenPool ?? this.db.pool,
      listenPool ? [this.db.sql.channel, this.db.sql.cancelChannel] : [],
      onNotify,
      (error) => this.events.reportError(this.id, 'listen', error),
      listenPool ? undefined : null,
    );
    await this.listener.start();
  }

  async stopListening(): Promise<void> {
    await this.listener?.stop();
  }

  /**
   * Runs a statement on the worker's pinned connection (the LISTEN one), which handlers
   * cannot take from it; on the pool while that connection is being re-established.
   */
  async run<Row extends QueryResultRow = QueryResultRow>(statement: Statement, values: unknown[]): Promise<Row[]> {
    return this.db.runOn<Row>(this.listener?.connection ?? this.db.pool, statement, values);
  }

  /** Inserts this worker's row (claims require it) and starts its heartbeats. */
  async register(): Promise<void> {
    const sent = this.now();
    await this.run('registerWorker', [this.id, this.options.workerTimeout, hostname(), process.pid, this.hooks!.concurrency()]);
    this.registered = true;
    this.provedAlive(sent);
    clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), this.options.heartbeatInterval);
  }

  async unregister(): Promise<void> {
    clearInterval(this.heartbeatTimer);
    this.registered = false;
    await this.run('unregisterWorker', [this.id]).catch(() => undefined);
  }

  /** A new id, after a stop: a later start registers under it, and rows left with the old one go to the sweep. */
  renewId(): void {
    this.id = newWorkerId();
  }

  /**
   * Proves this worker alive, on the database's clock. No row back: the cluster declared it
   * dead. After a claim whose reply was lost, also gives back what it holds unknowingly.
   */
  private async heartbeat(): Promise<void> {
    const hooks = this.hooks!;
    if (this.rejoining) {
      hooks.serialize(() => this.rejoin());
      return;
    }
    const id = this.id;
    const sent = this.now();
    try {
      let rows: Array<{ cancelled: string[] }>;
      // Counted while the statement is on its way only: afterHeartbeat's startPrefetched may ask for another (beatNow).
      this.beating += 1;
      try {
        rows = await this.run<{ cancelled: string[] }>('heartbeatWorker', [id]);
      } finally {
        this.beating -= 1;
      }
      // Unregistered meanwhile (a stop): the row is gone because this worker removed it.
      if (!this.registered) return;
      if (rows.length === 0 && id === this.id) {
        this.fence(id);
        return;
      }
      if (rows[0] && id === this.id) {
        this.provedAlive(sent);
        hooks.cancelsHeard(rows[0].cancelled);
      }
      hooks.afterHeartbeat();
    } catch (error) {
      this.events.reportError(this.id, 'heartbeat', error);
    }
  }

  /** When a statement that proves this worker alive is sent, on both clocks. */
  private now(): { wall: number; mono: number } {
    return { wall: Date.now(), mono: performance.now() };
  }

  /** A registration or heartbeat sent at `sent` found the row: kept if it is the latest (replies may come out of order). */
  private provedAlive(sent: { wall: number; mono: number }): void {
    this.lastHeartbeatAt = Math.max(this.lastHeartbeatAt ?? 0, sent.wall);
    this.provenAliveAt = Math.max(this.provenAliveAt ?? 0, sent.mono);
  }

  /**
   * The cluster declared this worker dead: at once, before anything else can start one of its
   * jobs, it takes a new id and the worker drops what it held (hooks.fenced), so that nothing
   * claimed under the old id is ever written under the new one. Then it registers again, in
   * the fetch chain.
   */
  private fence(oldId: string): void {
    if (oldId !== this.id || !this.registered) return;
    this.id = newWorkerId();
    this.registered = false; // until rejoin(): heartbeats meanwhile find no row, and that is expected
    this.rejoining = true;
    const lostJobs = this.hooks!.fenced(oldId);
    this.logger.error(
      `Worker ${oldId} was declared dead by the cluster (no heartbeat for ${this.options.workerTimeout} ms: a stall or a lost connection). ` +
        `Its ${lostJobs.length} job(s) were given to other workers; it writes no outcome for them and aborted their handlers` +
        `${lostJobs.length ? ` (${lostJobs.join(', ')})` : ''}. Rejoining as ${this.id}.`,
    );
    this.events.emit({ type: 'worker:fenced', workerId: oldId, newWorkerId: this.id, lostJobs });
    this.hooks!.serialize(() => this.rejoin());
  }

  /** Registers the new id after a fence; tried again at each heartbeat until it succeeds. */
  private async rejoin(): Promise<void> {
    if (!this.rejoining || this.hooks!.stopping()) return;
    try {
      await this.register();
      this.rejoining = false;
    } catch (error) {
      this.events.reportError(this.id, 'heartbeat', error);
    }
  }
}
