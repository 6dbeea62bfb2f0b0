import { Injectable } from '@nestjs/common';
import type { Job } from '../core/job';

/** A free slot of this process's worker, kept for one job while its insert runs. */
export interface LocalSlot {
  /** The worker the insert claims the job for. */
  readonly workerId: string;
  /** The insert committed the job claimed for `workerId`: run it here. */
  start(job: Job): void;
  /** The insert left the job unclaimed (the worker's row was gone, or it was not due): the slot is free again. */
  free(): void;
  /**
   * The insert failed: the slot is free again, and the server may have committed it (a reply
   * lost), locking a job for the worker that it does not know, as a claim whose reply was lost.
   */
  failed(): void;
}

/** What a worker offers: a slot for a due job of no named queue, or undefined when it cannot start one at once. */
export interface LocalStarter {
  keepSlot(task: string, flags: readonly string[]): LocalSlot | undefined;
}

/**
 * A task with `globalConcurrency` is never started here: only its claim counts the cluster's slots.
 *
 * Where JobQueueService.add() meets this process's worker (which sits above the service and
 * offers itself here while it runs). A job added outside any transaction, due now and in no
 * named queue, whose task this worker runs, is inserted already claimed by it when it has a
 * free slot and nothing claimed waiting: it starts as the insert returns, without the NOTIFY
 * and the claim that a worker elsewhere needs (about half of the time from add() to the
 * handler). `localStart: false` in the module's options turns this off.
 */
@Injectable()
export class LocalStart {
  private starter?: LocalStarter;

  offer(starter: LocalStarter | undefined): void {
    this.starter = starter;
  }

  /** What the worker offers now, if anything. */
  get offered(): LocalStarter | undefined {
    return this.starter;
  }

  keepSlot(task: string, flags: readonly string[]): LocalSlot | undefined {
    return this.starter?.keepSlot(task, flags);
  }
}
