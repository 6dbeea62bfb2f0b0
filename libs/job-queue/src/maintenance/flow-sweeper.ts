import type { Retention } from '../core/options';
import type { PinnedConnection } from '../db/pinned-connection';

/** Flow jobs settled per round at most. */
const SETTLE_BATCH = 1_000;
/** Finished flows deleted per round at most. */
const DELETE_BATCH = 1_000;

/**
 * The flows' safety net (sweep_flows() in the migration): the trigger on finished_jobs settles
 * a flow's dependents in the transaction that finishes each job, but not a job finished by a
 * worker of an earlier version (its finished row lacks the flow columns) nor one deleted
 * outright. Those are settled here, and a flow idle for `workerTimeout` is counted again from
 * its rows, and finished if none is left. Every worker of this version runs it twice per
 * `workerTimeout` (maintenance.ts), not only the maintenance leader: during a rolling deploy the leader may be an older worker,
 * which knows nothing of flows. Two sweeps at once settle each job once (edges are settled
 * under their row locks, idle flows taken SKIP LOCKED).
 */
export async function sweepFlows(pinned: PinnedConnection, workerTimeout: number): Promise<{ settled: number; finished: number }> {
  const [swept] = await pinned.run<{ settled: number; finished: number }>('sweepFlows', [SETTLE_BATCH, workerTimeout]);
  return swept;
}

/**
 * The leader's retention of flows: finished flows none of whose jobs retention kept go, with
 * their edges, once the longest retention has passed (a state kept forever keeps its flows).
 */
export async function deleteFinishedFlows(pinned: PinnedConnection, retention: Retention): Promise<void> {
  const kept = Object.values(retention);
  if (!kept.includes(null)) await pinned.run('deleteFinishedFlows', [Math.max(...(kept as number[])), DELETE_BATCH]);
}
