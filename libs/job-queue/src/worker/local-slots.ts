import type { AsyncResource } from 'node:async_hooks';
import type { Job } from '../core/job';
import type { LocalSlot, LocalStarter } from '../service/local-start';
import { maxHeld } from './prefetch';
import type { Producer } from './producer';
import { WorkerPart, type WorkerParts } from './worker-state';

/**
 * Slots for jobs this process is adding (service/local-start.ts): the worker offers this to
 * the service while it runs. A slot is given only while this worker runs the job's task, may
 * take its flags, has a free slot and room under maxHeld, and holds no claimed job waiting nor
 * knows of more in the table, nor claims (those go first).
 */
export class LocalSlots extends WorkerPart implements LocalStarter {
  constructor(
    parts: WorkerParts,
    private readonly producer: Producer,
    /** Starts a job's handler (executor.ts). */
    private readonly launch: (job: Job) => void,
    /** The worker's own async context (from its start()), which jobs started here run in. */
    private readonly scope: () => AsyncResource,
  ) {
    super(parts);
  }

  keepSlot(task: string, flags: readonly string[]): LocalSlot | undefined {
    const { state, producer } = this;
    if (!state.started || state.stopping || !this.membership.isMember || !this.tasks.get(task)) return undefined;
    // Past workerTimeout without a heartbeat: the cluster may have declared this worker dead.
    if (this.membership.mayBeDeclaredDead) return undefined;
    // A limited task (globalConcurrency, rateLimit) starts only through its own claim, which counts what the cluster holds and started.
    if (producer.limits.isLimited(task)) return undefined;
    // Paused (as this worker knows it), or a read of the pauses is due: the job waits in the table for a claim.
    if (!this.controls.runs(task) || this.controls.isStale) return undefined;
    // A rate-limited task waits for a free slot: the next one is its claim's (producer.slotWanted).
    if (state.prefetched.length > 0 || producer.moreMayBeWaiting || producer.slotWanted || state.busySlots >= state.concurrency) return undefined;
    // A give-back of the rows locked for us that we do not know is due: it must not take the job of an insert in flight.
    if (producer.claimReplyLost) return undefined;
    // A claim on its way marks jobs started for the slots that were free when it began: they are theirs.
    if (producer.claiming) return undefined;
    if (state.busySlots + state.batcher.unwritten >= maxHeld(state.concurrency)) return undefined;
    if (flags.length > 0) {
      const forbidden = this.options.forbiddenFlags;
      // A function may answer differently by now: such a job goes through a claim, which asks it.
      if (typeof forbidden === 'function' || forbidden?.some((flag) => flags.includes(flag))) return undefined;
    }
    const workerId = this.membership.workerId;
    let settle!: () => void;
    const settled = new Promise<void>((resolve) => (settle = resolve));
    state.keptSlots.add(settled);
    const giveUp = () => {
      state.keptSlots.delete(settled);
      settle();
    };
    const free = () => {
      giveUp();
      // Called in the adding caller's async context: the jobs it starts run in the worker's own.
      this.scope().runInAsyncScope(() => producer.startPrefetched());
    };
    return {
      workerId,
      start: (job) => {
        giveUp();
        // Fenced meanwhile: the job is locked by the old id, and the sweep's orphan rule frees it.
        if (workerId !== this.membership.workerId) return;
        // Stopping: stop() waited for this insert, and gives the job back with the prefetched ones.
        if (state.stopping) state.prefetched.push(job);
        // A stall since the insert, past workerTimeout: the job may have been rescued and run elsewhere; it starts after a heartbeat (startPrefetched).
        else if (this.membership.mayBeDeclaredDead) {
          state.prefetched.unshift(job);
          this.scope().runInAsyncScope(() => producer.startPrefetched());
        }
        // Out of the adding caller's async context (its request's CLS, its active span), as a
        // claimed job runs: in the worker's own, from its start().
        else this.scope().runInAsyncScope(() => this.launch(job));
      },
      free,
      failed: () => {
        // Given back at the next heartbeat if it committed (giveBackUnknown), as a claim whose reply was lost.
        if (workerId === this.membership.workerId) producer.claimReplyLost = true;
        free();
      },
    };
  }
}
