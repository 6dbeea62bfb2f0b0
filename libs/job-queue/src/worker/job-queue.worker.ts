import { Inject, Injectable, Logger, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { AsyncResource } from 'node:async_hooks';
import type { Observable } from 'rxjs';
import type { JobQueueEvent } from '../core/events';
import type { JobContext } from '../core/job-context';
import { JOB_QUEUE_OPTIONS, keepsCompleted, type ResolvedJobQueueOptions } from '../core/options';
import { JOB_ID_PATTERN } from '../core/validate-job-spec';
import { Controls } from '../control/controls';
import { CONTROLS_CHANGED } from '../sql/pauses';
import { JobQueueDatabase } from '../db/job-queue-database';
import { concurrencyForPool, poolSizeWarning } from '../db/pool-size';
import { TaskRegistry } from '../discovery/task-registry';
import { JobQueueEvents } from '../events/job-queue-events';
import { QueueEventAudience } from '../events/queue-event-audience';
import { JobClsContext } from '../peers/job-cls-context';
import { JobQueueService } from '../service/job-queue.service';
import { JobFlows } from '../service/job-flows';
import { LocalStart } from '../service/local-start';
import { JobQueueTelemetry } from '../telemetry/job-queue-telemetry';
import { Executor } from './executor';
import { LocalSlots } from './local-slots';
import { WorkerMembership } from './membership';
import { Producer } from './producer';
import { ReleaseBatcher } from './release-batcher';
import { writeReleases } from './release-parameters';
import { drainAtShutdown } from './shutdown';
import { WorkerState, type WorkerStatus } from './worker-state';

export type { WorkerStatus } from './worker-state';

/**
 * The worker: claims jobs of the tasks this process knows, runs up to `concurrency` of them
 * at once, and releases them in batches. It wakes on NOTIFY, polls every `pollInterval`, and
 * starts with the app (unless `worker: false`) and drains in Nest's shutdown hooks.
 *
 * This class wires its parts and runs their lifecycle; each part owns its state:
 * membership.ts (id, heartbeats, fencing, the pinned connection), producer.ts (the fetch
 * loop, claims, prefetch, give-backs), executor.ts (one job and its outcome), local-slots.ts
 * (jobs started at their add), release-batcher.ts (outcomes written in batches), and
 * worker-state.ts (the slots they share). Data path: producer.wake() → claim (sql/claim.ts) →
 * executor.launch() → handler → the outcome to the ReleaseBatcher (sql/release.ts).
 */
@Injectable()
export class JobQueueWorker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('JobQueueWorker');
  /** Every event of this process: jobs starting, succeeding, failing; the worker starting, stopping, erring (events/). */
  readonly events$: Observable<JobQueueEvent>;
  private readonly state: WorkerState;
  private readonly executor: Executor;
  private readonly producer: Producer;
  private readonly localSlots: LocalSlots;
  /** What is paused and the limits set at run time, read at start, when told (jobs channel, CONTROLS_CHANGED) and at each poll (control/controls.ts). */
  private readonly controls: Controls;
  /** runUntilIdle() calls under way. */
  private idleRuns = 0;
  /** The notice that it polls (transactionPooling without listenUrl) was logged. */
  private pollingLogged = false;
  /** The async context start() ran in, which claimed jobs inherit from its timers and listener: jobs started at their add run in it too. */
  private ownScope = new AsyncResource('nestjs-job-queue worker');

  constructor(
    private readonly db: JobQueueDatabase,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
    private readonly tasks: TaskRegistry,
    jobs: JobQueueService,
    telemetry: JobQueueTelemetry,
    clsContext: JobClsContext,
    private readonly localStart: LocalStart,
    private readonly events: JobQueueEvents,
    private readonly membership: WorkerMembership,
    private readonly audience: QueueEventAudience,
    flows: JobFlows,
  ) {
    this.events$ = events.events$;
    this.state = new WorkerState(this.createBatcher(membership.workerId));
    const addJob = ((identifier, ...args) => jobs.add(identifier, ...args)) as JobContext['addJob'];
    const launch = (job: Parameters<Executor['launch']>[0]) => this.executor.launch(job);
    this.controls = new Controls(
      // On the claim connection, as the claims that wait for it: the pinned one may be busy with a maintenance sweep waiting for a lock.
      () => this.producer.readControls(),
      (error) => events.reportError(membership.workerId, 'claim', error),
      () => void this.producer.wake(),
    );
    const parts = { state: this.state, membership, db, options, tasks, events, audience, controls: this.controls };
    this.executor = new Executor(parts, telemetry, clsContext, addJob, (ms) => this.producer.slotFreed(ms), flows);
    this.producer = new Producer(parts, launch);
    this.localSlots = new LocalSlots(parts, this.producer, launch, () => this.ownScope);
    membership.attach({
      serialize: (step) => this.producer.serialize(step),
      cancelsHeard: (ids) => this.executor.cancel(ids),
      afterHeartbeat: () => this.producer.afterHeartbeat(),
      fenced: (oldId) => this.fenced(oldId),
      stopping: () => this.state.stopping,
      concurrency: () => this.state.concurrency,
    });
  }

  /** This worker's id in the `workers` table and in `locked_by`. It changes if the worker is fenced and rejoins. */
  get workerId(): string {
    return this.membership.workerId;
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.options.worker) await this.start();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.stop();
  }

  /** True from the moment stop() begins (the app is shutting down) until the worker has stopped. */
  get isStopping(): boolean {
    return this.state.stopping && (this.state.started || this.membership.isRegistered);
  }

  /** Jobs running in this process right now. */
  get runningCount(): number {
    return this.state.running.size;
  }

  /** For health checks: whether this worker runs, hears notifications, and proves itself alive. */
  status(): WorkerStatus {
    return {
      running: this.state.started && !this.state.stopping,
      listening: this.membership.listening,
      polling: this.membership.polling,
      registered: this.membership.isMember,
      lastHeartbeatAt: this.membership.lastHeartbeat,
      runningJobs: this.state.running.size,
      paused: this.controls.list,
    };
  }

  async start(): Promise<void> {
    const { state, membership, producer } = this;
    if (state.started) return;
    state.started = true;
    state.stopping = false;
    this.ownScope = new AsyncResource('nestjs-job-queue worker');
    this.sizeSlots();
    const cancels = this.db.sql.cancelChannel;
    await membership.listen((channel, payload) => {
      if (channel === cancels) this.executor.cancel([payload ?? '']);
      else if (payload === 'listeners') void this.audience.refresh(); // a listener of queue events came or went
      else if (payload && JOB_ID_PATTERN.test(payload)) producer.wakeFor(payload); // a job added alone, named (sql/add.ts jobNamed); the others are '', 'paused' or 'listeners'
      else {
        // Pauses or limits changed (read before the next claim), or (re)connected: a change may have gone unheard.
        if (payload === CONTROLS_CHANGED || channel === undefined) this.controls.markStale();
        if (channel === undefined) void this.audience.refresh();
        void producer.wake();
      }
    });
    await Promise.all([this.audience.refresh(), this.controls.refresh()]);
    await membership.register();
    // The listener's first wake-up may have claimed before the row existed (claims need it), and found nothing.
    void producer.wake();
    producer.startPolling();
    if (this.options.localStart) this.localStart.offer(this.localSlots);
    this.logger.log(`Worker ${membership.workerId} started: concurrency ${state.concurrency}, tasks ${this.tasks.identifiers().join(', ') || '(none)'}`);
    if (membership.polling) this.logPollingOnce();
    const poolWarning = poolSizeWarning(this.db.pool.options.max, state.concurrency);
    if (poolWarning) this.logger.warn(`Worker ${membership.workerId}: ${poolWarning}`);
    this.events.emit({ type: 'worker:start', workerId: membership.workerId });
  }

  /**
   * Stops claiming, lets running jobs finish within the grace period, then aborts them and
   * gives back the unfinished ones with their attempt returned (shutdown.ts).
   */
  async stop(): Promise<void> {
    const { state, membership, producer } = this;
    // A producer-only app (worker: false) may still be running jobs through runUntilIdle().
    const busy = state.running.size > 0 || state.prefetched.length > 0;
    if (state.stopping || (!state.started && !busy && !membership.isRegistered)) return producer.closeClaims();
    state.stopping = true;
    this.localStart.offer(undefined);
    await producer.stopFetching();
    await Promise.all(state.keptSlots);
    const givenBack = await drainAtShutdown(state, producer, this.executor, membership.workerId, this.options.shutdownGracePeriod, this.logger);
    state.running.clear();
    await producer.closeClaims();
    await membership.unregister();
    await membership.stopListening();
    state.started = false;
    const workerId = membership.workerId;
    // A later start() or runUntilIdle() registers under a new id: rows the give-back had to
    // leave (a caller's lock) stay with the old one, for the sweep, and never with a live worker that forgot them.
    membership.renewId();
    this.followNewId();
    if (givenBack.length > 0) this.logger.warn(`Gave back ${givenBack.length} unfinished job(s): ${givenBack.join(', ')}`);
    this.logger.log(`Worker ${workerId} stopped`);
    this.events.emit({ type: 'worker:stop', workerId, givenBack });
  }

  /**
   * Runs every job that is available now (including jobs those jobs add) and resolves when
   * none is left and every result is written. For tests and one-off scripts; works with
   * `worker: false` too (the worker then registers for the run, and heartbeats meanwhile).
   */
  async runUntilIdle(): Promise<void> {
    const { state, membership, producer } = this;
    if (state.stopping) return; // stopped or stopping: nothing more runs here
    const ownRegistration = !membership.isRegistered;
    this.idleRuns += 1;
    try {
      if (ownRegistration) {
        this.sizeSlots();
        await membership.register();
      }
      await producer.runWhileAvailable();
    } finally {
      // A producer-only app keeps no connection for claims once no runUntilIdle() is under way.
      if (--this.idleRuns === 0 && !state.started && !state.stopping) await producer.closeClaims();
      if (ownRegistration && !state.started && !state.stopping) await membership.unregister();
    }
  }


  /** Says once (at its first start) why a worker behind a transaction-mode pooler polls. */
  private logPollingOnce(): void {
    if (this.pollingLogged) return;
    this.pollingLogged = true;
    this.logger.warn(
      `Worker ${this.membership.workerId}: transactionPooling is on and listenUrl is not set, so this worker cannot LISTEN (a transaction-mode pooler ` +
        `gives each transaction any server connection, and notifications would go to whichever had listened): it polls for jobs every ` +
        `${this.options.pollInterval} ms and hears cancels at its heartbeats (every ${this.options.heartbeatInterval} ms). ` +
        'Set listenUrl to a direct connection string to be woken at once.',
    );
  }

  /** Concurrency: the option, or as many as the pool holds besides the queue's own connections, at most 10. */
  private sizeSlots(): void {
    this.state.concurrency = this.options.concurrency ?? concurrencyForPool(this.db.pool.options.max);
  }

  /**
   * The cluster declared this worker dead as `oldId` (membership.ts took a new id and reports
   * it): the handlers are aborted and the prefetched jobs forgotten, and releases go to a new
   * batcher, so that nothing claimed under the old id is ever written under the new one (a
   * claim in flight is dropped when it returns: its id is stale). Returns the jobs it lost.
   */
  private fenced(oldId: string): string[] {
    const lostJobs = this.executor.loseAll(oldId);
    void this.followNewId().stop(); // writes nothing that matters: every row it names is locked by someone else now
    return lostJobs;
  }

  /** A release batcher for the membership's current id, after a fence or a stop; returns the old one. */
  private followNewId(): ReleaseBatcher {
    const old = this.state.batcher;
    this.state.batcher = this.createBatcher(this.membership.workerId);
    return old;
  }

  /**
   * Releases for `workerId` only: after a fence or a stop, a new batcher is made for the new
   * id. A flush that frees a named queue notifies every worker (this one too), so it needs no wake-up.
   */
  private createBatcher(workerId: string): ReleaseBatcher {
    return new ReleaseBatcher(
      writeReleases(this.db, workerId, keepsCompleted(this.options), () => this.audience.current()),
      (error) => this.events.reportError(this.membership.workerId, 'release', error),
      (cancelled) => {
        for (const { id, reason } of cancelled) this.events.emit({ type: 'job:cancelled', jobId: id, reason });
      },
      // A fetch held back by unwritten releases has room again.
      () => this.producer?.releaseWritten(),
    );
  }
}
