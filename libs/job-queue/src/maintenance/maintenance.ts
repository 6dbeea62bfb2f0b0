import { Inject, Injectable, Logger, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { JobQueueDatabase } from '../db/job-queue-database';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { PinnedConnection } from '../db/pinned-connection';
import { JobQueueEvents } from '../events/job-queue-events';
import { QueueEventAudience } from '../events/queue-event-audience';
import { foldJobCounts } from './count-folder';
import { finishLeftovers } from './finisher';
import { deleteExpiredJobs } from './history-cleaner';
import { deleteFinishedFlows, sweepFlows } from './flow-sweeper';
import { JobsVacuum } from './jobs-vacuum';
import { deleteIdleQueues } from './queue-cleaner';
import { rescueDeadWorkers } from './rescuer';
import { MAINTENANCE_LEASE } from '../sql/maintenance';

/** Idle queue rows are looked for at most this often. */
const QUEUE_CLEANUP_EVERY_MS = 60_000;

/**
 * The cluster's upkeep, run by one replica at a time (River's leader, elected the same way):
 * every worker process tries, each `heartbeatInterval`, to take or renew a lease that
 * expires `workerTimeout` later on the database's clock. The holder sweeps dead workers'
 * jobs (rescuer.ts), moves done jobs nobody finished to the history (finisher.ts), folds the job counters'
 * deltas (count-folder.ts), deletes history past its retention (history-cleaner.ts), now and then idle queue rows
 * (queue-cleaner.ts), and vacuums `jobs` once enough of its rows died (jobs-vacuum.ts). A leader that
 * stalls loses the lease when it expires; its sweeps are safe to overlap with the next
 * leader's anyway. Statements run on the worker's pinned connection, so a pool full of
 * handlers cannot hold them up.
 */
@Injectable()
export class JobQueueMaintenance implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('JobQueueMaintenance');
  private timer?: NodeJS.Timeout;
  private round?: Promise<void>;
  private leader = false;
  private lastQueueCleanup = 0;
  private lastFlowSweep = 0;
  private stopped = true;
  private readonly vacuum: JobsVacuum;

  constructor(
    db: JobQueueDatabase,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
    private readonly pinned: PinnedConnection,
    private readonly events: JobQueueEvents,
    private readonly audience: QueueEventAudience,
  ) {
    this.vacuum = new JobsVacuum(pinned, events, db, options.schema, this.logger);
  }

  /** Whether this process held the lease at its last try. */
  get isLeader(): boolean {
    return this.leader;
  }

  onApplicationBootstrap(): void {
    if (this.options.worker) this.start();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.stop();
  }

  /** Starts the rounds (with the app when it runs a worker; by hand beside a worker started by hand). */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /** Stops the rounds and gives the lease up. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.round;
    await this.vacuum.stop();
    if (this.leader) {
      // Let another replica take over at once rather than when the lease expires.
      await this.pinned.run('dropLease', [MAINTENANCE_LEASE, this.pinned.workerId]).catch(() => undefined);
      this.leader = false;
    }
  }

  /** Runs one round now: take or renew the lease and, if it is ours, all the upkeep. For tests and scripts. */
  async runOnce(): Promise<void> {
    await this.round;
    this.round = this.tick(true);
    await this.round;
    await this.vacuum.idle();
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.round = this.tick().finally(() => {
        // A little jitter keeps the replicas' tries from lining up.
        this.schedule(this.options.heartbeatInterval * (0.9 + Math.random() * 0.2));
      });
    }, delayMs);
  }

  private async tick(everything = false): Promise<void> {
    try {
      const { workerTimeout } = this.options;
      const held = await this.pinned.run('takeLease', [MAINTENANCE_LEASE, this.pinned.workerId, workerTimeout]);
      const wasLeader = this.leader;
      this.leader = held.length > 0;
      if (this.leader !== wasLeader) {
        this.logger.log(this.leader ? `${this.pinned.workerId} is the maintenance leader` : `${this.pinned.workerId} is no longer the maintenance leader`);
      }
      // Twice per workerTimeout is enough for a safety net, and spares a large flow's unsettled edges a walk each round.
      if (everything || Date.now() - this.lastFlowSweep >= workerTimeout / 2) {
        this.lastFlowSweep = Date.now();
        await sweepFlows(this.pinned, workerTimeout);
      }
      // Holds that are over (ctx.rateLimited): workers of this release ignore them, those of earlier ones read them as pauses until they are gone.
      // Every worker of this release deletes them (a statement on a table of a few rows), so an old maintenance leader cannot keep them.
      await this.pinned.run('deleteEndedHolds', []).catch((error: unknown) => this.events.reportError(this.pinned.workerId, 'maintenance', error));
      if (!this.leader) return;
      // current(), not fresh(): the read would take a pool connection, which handlers may all hold
      await rescueDeadWorkers(this.pinned, this.events, workerTimeout, this.logger, this.audience.current());
      await finishLeftovers(this.pinned);
      // Its own failure (and its budget: a quarter of a round) must not cost the round's other duties.
      await foldJobCounts(this.pinned, this.options.heartbeatInterval / 4).catch((error: unknown) => this.events.reportError(this.pinned.workerId, 'maintenance', error));
      // Half a round at most, so that the lease is renewed on time behind a big backlog.
      await deleteExpiredJobs(this.pinned, this.options.retention, this.options.heartbeatInterval / 2);
      await deleteFinishedFlows(this.pinned, this.options.retention);
      if (everything || Date.now() - this.lastQueueCleanup >= QUEUE_CLEANUP_EVERY_MS) {
        await deleteIdleQueues(this.pinned);
        await this.pinned.run('deleteOldStarts', []); // rate limits' starts past their window and the hour kept
        this.lastQueueCleanup = Date.now();
      }
      if (this.options.vacuumJobs) await this.vacuum.startIfDue();
    } catch (error) {
      this.events.reportError(this.pinned.workerId, 'maintenance', error);
    }
  }
}
