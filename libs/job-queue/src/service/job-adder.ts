import { Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { JobQueueError } from '../core/errors';
import { toJob, type Job, type JobRow } from '../core/job';
import { toTraceColumns, traceValues, type TraceColumns } from '../core/trace-context';
import type { AddArgs, TaskName, TaskPayload, TypedJobSpec } from '../core/typed-tasks';
import type { ValidJob } from '../core/validate-job-spec';
import { JobQueueDatabase } from '../db/job-queue-database';
import { KEYLESS_TYPES } from '../sql/add';
import { notifyIfDue } from '../sql/notify-after';
import { AmbientTransaction } from '../peers/ambient-transaction';
import { JobQueueTelemetry } from '../telemetry/job-queue-telemetry';
import { addedJobs, type AddedRow } from './added-jobs';
import { checkManager } from './check-manager';
import { addDeduped, lockJobKeys } from './deduped-add';
import { JobSpecValidator } from './job-spec-validator';
import { LocalStart, type LocalSlot } from './local-start';


/**
 * The data path's first step (add → row + NOTIFY → claim → run → release), behind
 * JobQueueService.add() and addMany(): checks each job, picks the statement (sql/add.ts: keyless,
 * keyed, started in a free local slot, throttled by dedupeFor, in bulk) and traces it.
 */
@Injectable()
export class JobAdder {
  constructor(
    private readonly db: JobQueueDatabase,
    private readonly specs: JobSpecValidator,
    private readonly telemetry: JobQueueTelemetry,
    private readonly ambient: AmbientTransaction,
    private readonly localStart: LocalStart,
  ) {}

  /**
   * Adds a job. With `spec.manager` the insert joins that transaction: the job (and the
   * wake-up of the workers) exists only once it commits.
   */
  async add<Name extends TaskName>(identifier: Name, ...[payload, spec = {}]: AddArgs<Name>): Promise<Job<TaskPayload<Name>>> {
    const manager = spec?.manager ?? this.ambient.manager();
    checkManager(manager, this.db.dataSource);
    const job = this.specs.validate(identifier, payload, spec);
    const [added] = await this.telemetry.traceAdd([job], 'add', async (carrier) => {
      const trace = toTraceColumns(carrier);
      if (job.jobKey === null) {
        const keyless = [job.identifier, job.payloadJson, job.queueName, job.runAt, job.maxAttempts, job.priority, job.flags, ...traceValues(trace), job.group];
        const slot = manager === undefined ? this.keepLocalSlot(job) : undefined;
        if (slot) return this.addStarted(job, keyless, trace, slot);
        if (manager) return addedJobs([job], await this.db.run<AddedRow>('addJobKeyless', keyless, manager), trace);
        // in a transaction of ours, in one message with its NOTIFY after the commit (sql/notify-after.ts says why)
        // naming the job for the workers to claim it by id, unless it is in a named queue (sql/add.ts jobNamed)
        const named = job.queueName === null ? this.db.sql.jobsTable : undefined;
        const after = { quiet: 'addJobKeylessQuiet', statements: notifyIfDue(this.db.sql.channel, job.runAt, named) } as const;
        return addedJobs([job], await this.db.runThenNotify<AddedRow>('addJobKeylessNamed', KEYLESS_TYPES, keyless, after), trace);
      }
      const values = [job.identifier, job.payloadJson, job.queueName, job.runAt, job.maxAttempts, job.jobKey, job.priority, job.flags, job.jobKeyMode];
      const addKeyed = async (into?: EntityManager) => {
        const rows = await this.db.run<JobRow>('addJobKeyed', [...values, job.group, ...traceValues(trace)], into);
        return rows.map((row) => toJob(row));
      };
      return job.dedupeForMs === null ? addKeyed(manager) : addDeduped(this.db, { ...job, jobKey: job.jobKey, dedupeForMs: job.dedupeForMs }, manager, addKeyed);
    });
    return added as Job<TaskPayload<Name>>;
  }

  /** A free slot of this process's worker for `job`, if it can start there at once (service/local-start.ts). */
  private keepLocalSlot(job: ValidJob): LocalSlot | undefined {
    if (job.queueName !== null || (job.runAt !== null && job.runAt.getTime() > Date.now())) return undefined;
    return this.localStart.keepSlot(job.identifier, job.flags ?? []);
  }

  /** Inserts `job` (addJobKeyless's values `keyless`) claimed by the slot's worker (sql addJobStarted) and hands it over; returns the caller's copy. */
  private async addStarted(job: ValidJob, keyless: unknown[], trace: TraceColumns | null, slot: LocalSlot): Promise<Job[]> {
    let rows: AddedRow[];
    try {
      rows = await this.db.run<AddedRow>('addJobStarted', [...keyless, slot.workerId]);
    } catch (error) {
      slot.failed();
      throw error;
    }
    if (rows[0]?.locked_by === slot.workerId) slot.start(addedJobs([job], rows, trace)[0]);
    else slot.free();
    // The caller's own copy: the handler may already be changing its payload.
    return addedJobs([job], rows, trace);
  }

  /** Adds many jobs in one round trip and one NOTIFY; all are checked before any is written. */
  async addMany(specs: readonly TypedJobSpec[], options: { manager?: EntityManager } = {}): Promise<Job[]> {
    if (!Array.isArray(specs)) throw new JobQueueError('JQ_INVALID_SPEC', 'addMany takes an array of job specs');
    const manager = options?.manager ?? this.ambient.manager();
    checkManager(manager, this.db.dataSource);
    const jobs = specs.map((spec, index) => {
      try {
        if (spec === null || typeof spec !== 'object') throw new JobQueueError('JQ_INVALID_SPEC', 'a job spec must be an object');
        const { identifier, payload, ...rest } = spec;
        return this.specs.validate(identifier, payload, rest);
      } catch (error) {
        JobQueueError.rethrowAt(`addMany, job ${index}`, error);
      }
    });
    if (jobs.length === 0) return [];
    // Throttled adds take their keys' turns, all at once, then add one by one (service/deduped-add.ts), in one transaction.
    if (jobs.some((job) => job.dedupeForMs !== null)) {
      const each = async (into: EntityManager) => {
        await lockJobKeys(this.db, jobs.filter((job) => job.dedupeForMs !== null).map((job) => job.jobKey!), into);
        const added: Job[] = [];
        for (const spec of specs) added.push(await this.add(spec.identifier as TaskName, ...([spec.payload, { ...spec, manager: into }] as AddArgs<TaskName>)));
        return added;
      };
      return manager ? each(manager) : this.db.dataSource.transaction('READ COMMITTED', each);
    }
    const columns = [
      jobs.map((j) => j.identifier),
      jobs.map((j) => j.payloadJson),
      jobs.map((j) => j.queueName),
      jobs.map((j) => j.runAt),
      jobs.map((j) => j.maxAttempts),
      jobs.map((j) => j.priority),
      jobs.map((j) => (j.flags ? JSON.stringify(j.flags) : null)),
    ];
    const keyed = jobs.some((j) => j.jobKey !== null);
    const keys = [jobs.map((j) => j.jobKey), jobs.map((j) => j.jobKeyMode)];
    const groups = jobs.some((j) => j.group !== null) ? jobs.map((j) => j.group) : null;
    return this.telemetry.traceAdd(jobs, 'addMany', async (carrier) => {
      const trace = toTraceColumns(carrier);
      if (!keyed) {
        const values = [...columns, ...traceValues(trace), groups];
        if (manager) return addedJobs(jobs, await this.db.run<AddedRow>('addJobsBulk', values, manager), trace);
        // in a transaction of ours: one NOTIFY after the commit if any job is due, as add()'s
        const after = { quiet: 'addJobsBulkQuiet', statements: notifyIfDue(this.db.sql.channel, earliestRunAt(jobs)) } as const;
        return addedJobs(jobs, await this.db.runArraysThenNotify<AddedRow>('addJobsBulk', values, after), trace);
      }
      const rows = await this.db.run<JobRow>('addJobsKeyed', [...columns, ...keys, groups ?? jobs.map(() => null), ...traceValues(trace)], manager);
      return rows.map((row) => toJob(row));
    });
  }
}

/** The earliest run_at among `jobs`: null (now) if any has none. */
function earliestRunAt(jobs: readonly ValidJob[]): Date | null {
  let earliest: Date | null = null;
  for (const { runAt } of jobs) {
    if (runAt === null) return null;
    if (earliest === null || runAt < earliest) earliest = runAt;
  }
  return earliest;
}
