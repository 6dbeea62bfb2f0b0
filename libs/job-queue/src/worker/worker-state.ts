import type { Controls } from '../control/controls';
import type { PausedEntry } from '../control/paused-entry';
import type { Job } from '../core/job';
import type { ResolvedJobQueueOptions } from '../core/options';
import type { JobQueueDatabase } from '../db/job-queue-database';
import type { TaskRegistry } from '../discovery/task-registry';
import type { JobQueueEvents } from '../events/job-queue-events';
import type { QueueEventAudience } from '../events/queue-event-audience';
import type { WorkerMembership } from './membership';
import type { ReleaseBatcher } from './release-batcher';
import type { RunningJob } from './running-job';

/** What JobQueueWorker.status() reports. */
export interface WorkerStatus {
  /** Started and not stopping. */
  running: boolean;
  /** Its LISTEN connection is up (it hears new jobs and cancels at once). */
  listening: boolean;
  /**
   * It polls by design: transactionPooling without listenUrl, where LISTEN cannot work. New
   * jobs are then found within pollInterval, cancels at the next heartbeat; `listening` is false.
   */
  polling: boolean;
  /** Its row exists as far as it knows (false while it rejoins after being declared dead). */
  registered: boolean;
  /** Its last successful heartbeat (or registration). */
  lastHeartbeatAt: Date | null;
  runningJobs: number;
  /** What is paused (tasks, '*' for all, and named queues) as this worker last read it: it starts none of their jobs. */
  paused: readonly PausedEntry[];
}

/**
 * What the worker's parts share (job-queue.worker.ts makes one and hands it to the producer,
 * the executor and local slots): its slots and the jobs in them, its phase, and the release
 * batcher of its current id. One object, so that every part counts slots the same way.
 */
export class WorkerState {
  /** Jobs whose handler runs, by id. */
  readonly running = new Map<string, RunningJob>();
  /** Handlers of jobs this worker lost (fenced) that have not settled yet: they still take a slot. */
  readonly lostRunning = new Set<RunningJob>();
  /** Claimed (locked for this worker) but not started yet: see prefetch.ts. */
  readonly prefetched: Job[] = [];
  /** One per slot kept for a job this process is adding (local-slots.ts), settled when its insert returns: stop() waits for them. */
  readonly keptSlots = new Set<Promise<void>>();
  /** How many handlers run at once: the option, or what the pool holds (set before the first claim). */
  concurrency = 1;
  started = false;
  stopping = false;

  /** Releases for the current worker id only: a new one is made when the id changes (job-queue.worker.ts). */
  constructor(public batcher: ReleaseBatcher) {}

  /** Slots taken: running handlers, including lost ones that have not settled, and slots kept for jobs being added. */
  get busySlots(): number {
    return this.running.size + this.lostRunning.size + this.keptSlots.size;
  }

  /** The ids of the jobs this worker holds: running and prefetched. */
  heldIds(): string[] {
    return [...this.running.keys(), ...this.prefetched.map((job) => job.id)];
  }
}

/** What every part of the worker is given: the shared state and the module's services they all use. */
export interface WorkerParts {
  readonly state: WorkerState;
  readonly membership: WorkerMembership;
  readonly db: JobQueueDatabase;
  readonly options: ResolvedJobQueueOptions;
  readonly tasks: TaskRegistry;
  readonly events: JobQueueEvents;
  /** What the cluster's listeners of queue events want: the release publishes it. */
  readonly audience: QueueEventAudience;
  /** What is paused and the limits set at run time, as this worker last read them: its claims and local starts follow them. */
  readonly controls: Controls;
}

/** A part of the worker (producer, executor, local slots): the shared parts as its own fields. */
export abstract class WorkerPart {
  protected readonly state: WorkerState;
  protected readonly membership: WorkerMembership;
  protected readonly db: JobQueueDatabase;
  protected readonly options: ResolvedJobQueueOptions;
  protected readonly tasks: TaskRegistry;
  protected readonly events: JobQueueEvents;
  protected readonly audience: QueueEventAudience;
  protected readonly controls: Controls;

  constructor(parts: WorkerParts) {
    ({ state: this.state, membership: this.membership, db: this.db, options: this.options, tasks: this.tasks, events: this.events, audience: this.audience, controls: this.controls } = parts);
  }
}
