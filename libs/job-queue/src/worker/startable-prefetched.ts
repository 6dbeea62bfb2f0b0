import type { Controls } from '../control/controls';
import type { Job } from '../core/job';
import type { SlotLeases } from './slot-leases';

/**
 * Which of its prefetched jobs a worker may start now, or undefined when every one may. Not one
 * of a paused or held task, or of a paused queue: it waits, unstarted, until that runs again (a
 * resume, a hold's end), so that a task told 429 (ctx.rateLimited) starts nothing here at once.
 * Not a leased task's beyond its lease (slot-leases.ts). With nothing paused and nothing leased
 * (the common case) nothing is checked.
 */
export function startablePrefetched(controls: Controls, leases: SlotLeases): ((job: Job) => boolean) | undefined {
  const leased = leases.startable();
  const paused = controls.anyPaused;
  if (!leased && !paused) return undefined;
  return (job) => (!paused || controls.mayStart(job.taskIdentifier, job.queueName)) && (!leased || leased(job.taskIdentifier));
}
