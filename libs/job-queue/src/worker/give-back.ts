import type { Logger } from '@nestjs/common';
import { backoffMs, sleep } from '../core/backoff';
import type { JobQueueEvents } from '../events/job-queue-events';
import type { WorkerMembership } from './membership';
import type { WorkerState } from './worker-state';

/** How often a give-back retries rows someone else has locked (after 4, 16, 64, then 100 ms each: about 1 s). */
const GIVE_BACK_BUSY_TRIES = 12;

/** What a give-back uses of the worker. */
export interface GiveBackParts {
  membership: WorkerMembership;
  state: WorkerState;
  events: JobQueueEvents;
  logger: Logger;
}

/**
 * Gives back every job this worker holds except `keep`; returns their ids. A failed
 * statement is retried a few times; rows a caller has locked are tried again for a
 * moment, then left to the maintenance sweep (they are released once this worker's row
 * is gone and workerTimeout has passed), so that a caller's open transaction cannot hold
 * up the shutdown.
 */
export async function giveBackAllBut(parts: GiveBackParts, keep: string[]): Promise<string[]> {
  const { membership, events, logger } = parts;
  const givenBack: string[] = [];
  let failures = 0;
  for (let busyTries = 0; ; ) {
    let busy: number;
    try {
      const once = await giveBackOnce(parts, keep);
      givenBack.push(...once.givenBack);
      busy = once.busy;
    } catch (error) {
      events.reportError(membership.workerId, 'give-back', error);
      if (++failures >= 5) return givenBack;
      await sleep(backoffMs(failures));
      continue;
    }
    if (busy === 0) return givenBack;
    if (++busyTries > GIVE_BACK_BUSY_TRIES) {
      logger.warn(
        `${busy} job(s) held by ${membership.workerId} are row-locked by another transaction and were not given back; ` +
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
export async function giveBackOnce({ membership, state }: GiveBackParts, keep: string[]): Promise<{ givenBack: string[]; busy: number }> {
  const [row] = await membership.run<{ given_back: string[]; busy: string[] }>('giveBackJobs', [membership.workerId, [...keep, ...state.batcher.unwrittenIds()]]);
  return { givenBack: row.given_back, busy: row.busy.length };
}
