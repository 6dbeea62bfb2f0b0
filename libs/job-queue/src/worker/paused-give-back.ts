import type { Job } from '../core/job';
import type { GiveBackParts } from './give-back';
import type { Controls } from '../control/controls';

/**
 * The prefetched jobs of what was paused (or held: ctx.rateLimited) after they were claimed:
 * the worker starts none of them, and gives them back to the table with their attempt
 * returned (sql giveBackJobsById), so that they wait there like any paused job, keep their
 * named queue's order, and run after the resume on whichever worker claims them. Without
 * this a worker ran up to its whole prefetch of a task that a partner had just told 429.
 *
 * They leave `state.prefetched` at once, so that nothing starts them meanwhile; the statement
 * runs in the fetch chain (no claim beside it). Those it could not give back (a row another
 * transaction has locked, a failed statement) return to `state.prefetched`, for the next try.
 */
export class PausedGiveBack {
  constructor(
    private readonly parts: GiveBackParts & { controls: Controls },
    /** Runs a step in the fetch chain (Producer.serialize). */
    private readonly serialize: (step: () => Promise<unknown>) => void,
  ) {}

  /** Takes the prefetched jobs that may not start now out of the worker's hands. */
  takePaused(): void {
    const { state, controls } = this.parts;
    if (!controls.anyPaused || state.prefetched.length === 0 || state.stopping) return;
    const paused: Job[] = [];
    for (let i = state.prefetched.length - 1; i >= 0; i--) {
      const job = state.prefetched[i];
      if (!controls.starts(job.taskIdentifier, job.queueName)) paused.unshift(...state.prefetched.splice(i, 1));
    }
    if (paused.length > 0) this.serialize(() => this.giveBack(paused));
  }

  private async giveBack(jobs: Job[]): Promise<void> {
    const { membership, state, events, logger } = this.parts;
    let handled = new Set<string>();
    try {
      const [row] = await membership.run<{ given_back: string[]; cancelled: string[] }>('giveBackJobsById', [membership.workerId, jobs.map((job) => job.id)]);
      handled = new Set([...row.given_back, ...row.cancelled]);
      if (row.given_back.length > 0) logger.log(`Gave back ${row.given_back.length} job(s) claimed ahead of a pause: ${row.given_back.join(', ')}`);
    } catch (error) {
      events.reportError(membership.workerId, 'give-back', error);
    }
    state.prefetched.push(...jobs.filter((job) => !handled.has(job.id)));
  }
}
