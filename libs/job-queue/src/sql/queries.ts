/**
 * The index of the library's SQL: createQueries assembles one object of named statements
 * from one file per operation. A job's data path, step by step:
 *
 *   sql/add.ts          add: addJobKeyless, addJobStarted, addJobKeyed, addJobsBulk, addJobsKeyed
 *                       → the job's row, and a NOTIFY on the jobs channel when it is due
 *   sql/claim.ts        claim: claimJobs (a worker takes jobs and locks their named queues), claimUngroupedJobs
 *                       → run: the handler runs in the worker (worker/), no SQL
 *   sql/release.ts      release: releaseJobs, completeJobInTransaction (outcomes written, queues
 *                       freed, finished jobs moved to finished_jobs, waiters told)
 *
 * Beside it:
 *   sql/cron.ts         registerCrontabs, lockCrontab, scheduleCronTick (recurring jobs)
 *   sql/flows.ts        addFlow, dependencyResults, continueJob, getFlow*, cancelFlow, completeJobsWithResult, sweepFlows
 *   sql/read.ts         getJob(s), getJobsByKey, findJobsOfTask, listJobs*
 *   sql/counts.ts       countJobs (counters, not a scan), foldJobCounts (the leader folds their deltas)
 *   sql/admin.ts        removeJob, completeJobs, permanentlyFailJobs, rescheduleJobs, cancelJob, retryJobs
 *   sql/workers.ts      a worker's own row (register, heartbeat, unregister), giveBackJobs
 *   sql/maintenance.ts  the leader's lease, the sweep (rescueJobs), cleanup and retention
 *   sql/operations.ts   the dashboard's, health indicator's, telemetry's and the CLI's statements
 *   sql/schema-objects.ts  what a schema holds (tables, columns, functions, indexes): the CLI's validate
 *   sql/queue-events.ts cluster-wide events: who listens, and publishing them (release, cancel)
 *   sql/steps.ts        durable steps (ctx.step): loadJobSteps, recordJobStep, readJobStep, listJobSteps
 *   sql/pauses.ts       pause, resume, holdTask, listPaused (what the claims leave out: sql/claim.ts $1 and $6)
 *   sql/limits.ts       lockTaskLimitOf, countTaskSlots, recordStarts (the claim of a group-limited task), task limits set at run time
 *   sql/counted-claim.ts claimCountedJobs (a limited task's count, claim and record of starts in one statement)
 *   sql/slot-leases.ts  leaseTaskSlots, shrinkTaskSlots (a task limited by globalConcurrency alone)
 *   sql/group-claim.ts  claimGroupedJobs, recordGroupStarts, groupRateFreesInMs, groupAtLimit (limits per group)
 *
 * Shared fragments: sql/job-columns.ts (a job row's columns), sql/finished.ts (moving a job
 * to finished_jobs, its errors, telling waiters), sql/queue-head.ts (a named queue's head),
 * sql/epoch-microseconds.ts (times on the hot path), sql/identifier.ts (quoting, channels).
 * Job defaults: core/job-defaults.ts.
 */

import { createAddQueries } from './add';
import { createAdminQueries } from './admin';
import { createClaimQueries } from './claim';
import { createCountQueries } from './counts';
import { createCountedClaimQueries } from './counted-claim';
import { createCronQueries } from './cron';
import { createFlowQueries } from './flows';
import { createGroupClaimQueries } from './group-claim';
import { cancelChannel, eventsChannel, finishedChannel, jobsChannel, quoteIdentifier } from './identifier';
import { createLimitQueries } from './limits';
import { createMaintenanceQueries } from './maintenance';
import { createOperationsQueries } from './operations';
import { createPauseQueries, tellControlsChanged } from './pauses';
import { createQueueEventQueries } from './queue-events';
import { createReadQueries } from './read';
import { createReleaseQueries } from './release';
import { createSlotLeaseQueries } from './slot-leases';
import { createStepQueries } from './steps';
import { createWorkerQueries } from './workers';

/**
 * Every SQL statement the library runs at run time, in one place, named for what it does.
 * (The tables and the SQL functions themselves are created by the migrations.)
 * `$n` parameters are documented on each statement.
 */
export function createQueries(schema: string) {
  const s = quoteIdentifier(schema);
  const channel = jobsChannel(schema);
  const finished = finishedChannel(schema);
  const events = eventsChannel(schema);

  return {
    channel,
    /** The quoted jobs table, for statements written elsewhere (sql/notify-after.ts notifyIfDue). */
    jobsTable: `${s}.jobs`,
    finishedChannel: finished,
    cancelChannel: cancelChannel(schema),
    eventsChannel: events,

    ...createAddQueries(s, channel),
    ...createAdminQueries(s),
    ...createClaimQueries(s),
    ...createCountedClaimQueries(s),
    ...createReleaseQueries(s, channel, finished, events),
    ...createCronQueries(s),
    ...createFlowQueries(s, channel),
    ...createReadQueries(s),
    ...createCountQueries(s),
    ...createWorkerQueries(s, channel, finished),
    ...createMaintenanceQueries(s, channel, finished, events),
    ...createOperationsQueries(s, finished),
    ...createQueueEventQueries(s, channel, events),
    ...createStepQueries(s),
    ...createPauseQueries(s, channel),
    ...createLimitQueries(s, tellControlsChanged(channel)),
    ...createGroupClaimQueries(s),
    ...createSlotLeaseQueries(s),
  };
}

export type JobQueueQueries = ReturnType<typeof createQueries>;
