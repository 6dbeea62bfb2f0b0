import type { Retention } from '../core/options';
import type { PinnedConnection } from '../db/pinned-connection';

/** Flow jobs settled per round at most. */
const SETTLE_BATCH = 1_000;
/** Finished flows deleted per round at most. */
const DELETE_BATCH = 1_000;

/**
 * The flows' safety net, run by the maintenance leader each round (sweep_flows() in the
 * migration): the trigger on finished_jobs settles a flow's dependents in the transaction that
 * finishes each job, but not a job finished by a worker of an earlier version (its finished
 * row lacks the flow columns) nor one deleted outright. Those are settled here, and a flow
 * idle for `workerTimeout` is counted again from its rows, and finished if none is left.
 * Finished flows whose jobs retention deleted go too, with their edges, once the longest
 * retention has passed (a state kept forever keeps its flows).
 */
export async function sweepFlows(pinned: PinnedConnection, retention: Retention, workerTimeout: number): Promise<{ settled: number; finished: number }> {
  const [swept] = await pinned.run<{ settled: number; finished: number }>('sweepFlows', [SETTLE_BATCH, workerTimeout]);
  const kept = Object.values(retention);
  if (!kept.includes(null)) await pinned.run('deleteFinishedFlows', [Math.max(...(kept as number[])), DELETE_BATCH]);
  return swept;
}
