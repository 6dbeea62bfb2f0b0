import type { GiveBackParts } from './give-back';
import type { Controls } from '../control/controls';

/**
 * The prefetched jobs of what was paused (or held: ctx.rateLimited) after they were claimed:
 * the worker starts none of them, and gives them back to the table with their attempt
 * returned (sql giveBackJobsById), so that they wait there like any paused job, keep their
 * named queue's place, and run after the resume on whichever worker claims them. Without
 * this a worker ran up to its whole prefetch of a task that a partner had just told 429.
 *
 * They leave `state.prefetched` for good, at once, so that nothing starts them here again: a
 * job once taken is only ever given back, even if the pause ends first. The statement runs in
 * the fetch chain (no claim beside it). Jobs whose row another transaction has locked (`busy`),
 * or whose statement failed, are tried again after the next heartbeat; the others are done
 * with: given back, cancelled, or no longer locked for this worker (given back by
 * giveBackUnknown, rescued by the sweep after a stall, a reply lost after the commit). A try
 * leaves out the jobs this worker holds again (claimed anew once freed) or whose release it has
 * not written: only rows locked for it and not held are given back, as giveBackUnknown does.
 */
export class PausedGiveBack {
  /** Taken out of state.prefetched, not yet known to be given back. */
  private readonly pending = new Set<string>();
  private queued = false;

  constructor(
    private readonly parts: GiveBackParts & { controls: Controls },
    /** Runs a step in the fetch chain (Producer.serialize). */
    private readonly serialize: (step: () => Promise<unknown>) => void,
  ) {}

  /** Takes the prefetched jobs that may not start now out of the worker's hands, and gives them back. */
  takePaused(): void {
    const { state, controls } = this.parts;
    if (!controls.anyPaused || state.prefetched.length === 0 || state.stopping) return;
    const before = this.pending.size;
    for (let i = state.prefetched.length - 1; i >= 0; i--) {
      const job = state.prefetched[i];
      if (!controls.starts(job.taskIdentifier, job.queueName)) this.pending.add(state.prefetched.splice(i, 1)[0].id);
    }
    if (this.pending.size > before) this.retry();
  }

  /** Gives back what is pending, in the fetch chain: after a heartbeat, the jobs a try left. */
  retry(): void {
    if (this.pending.size === 0 || this.queued) return;
    this.queued = true;
    this.serialize(() => this.giveBack());
  }

  private async giveBack(): Promise<void> {
    this.queued = false;
    const { membership, state, events, logger } = this.parts;
    if (this.pending.size === 0 || state.stopping) return; // at shutdown, giveBackJobs takes every job held but the running ones
    // One this worker holds again (freed meanwhile by giveBackUnknown or a lost reply's commit, and
    // claimed anew), or ran since and has not written the release of, is no longer to give back.
    for (const id of [...state.heldIds(), ...state.batcher.unwrittenIds()]) this.pending.delete(id);
    const sent = [...this.pending];
    if (sent.length === 0) return;
    try {
      const [row] = await membership.run<{ given_back: string[]; busy: string[] }>('giveBackJobsById', [membership.workerId, sent]);
      // Only what this try sent is settled: jobs taken meanwhile (takePaused) wait for the try it queued.
      for (const id of sent) this.pending.delete(id);
      for (const id of row.busy) this.pending.add(id);
      if (row.given_back.length > 0) logger.log(`Gave back ${row.given_back.length} job(s) claimed ahead of a pause or hold: ${row.given_back.join(', ')}`);
    } catch (error) {
      events.reportError(membership.workerId, 'give-back', error);
    }
  }
}
