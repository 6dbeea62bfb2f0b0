import { Injectable } from '@nestjs/common';
import type { EntityManager, ObjectLiteral, Repository } from 'typeorm';
import { TaskRegistry } from '../decorators/task-registry';
import { JobQueueError } from '../errors';
import { JobQueueDatabase } from '../module/job-queue-database';
import { checkManager } from './check-manager';
import { toJob, type Job, type JobRow, type JobSpec, type JobSpecWithIdentifier } from './job';
import { LIMITS, optionalSmallint, optionalString, validateJob, validateJobIds, type ValidJob } from './validate-job-spec';

export interface RescheduleOptions {
  runAt?: Date;
  priority?: number;
  attempts?: number;
  maxAttempts?: number;
}

/** Adds and manages jobs. Every input is checked before anything is written. */
@Injectable()
export class JobQueueService {
  constructor(
    private readonly db: JobQueueDatabase,
    private readonly tasks: TaskRegistry,
  ) {}

  /**
   * Adds a job. With `spec.manager` the insert joins that transaction: the job (and the
   * wake-up of the workers) exists only once it commits.
   */
  async add<Payload = unknown>(identifier: string, payload?: Payload, spec: JobSpec = {}): Promise<Job<Payload>> {
    checkManager(spec?.manager, this.db.dataSource);
    const job = this.validate(identifier, payload, spec);
    const rows = await this.db.run<JobRow>(
      'addJob',
      [job.identifier, job.payloadJson, job.queueName, job.runAt, job.maxAttempts, job.jobKey, job.priority, job.flags, job.jobKeyMode],
      spec?.manager,
    );
    return toJob<Payload>(rows[0]);
  }

  /** Adds many jobs in one round trip and one NOTIFY; all are checked before any is written. */
  async addMany(specs: JobSpecWithIdentifier[], options: { manager?: EntityManager } = {}): Promise<Job[]> {
    if (!Array.isArray(specs)) throw new JobQueueError('JQ_INVALID_SPEC', 'addMany takes an array of job specs');
    checkManager(options?.manager, this.db.dataSource);
    const jobs = specs.map((spec, index) => {
      try {
        if (spec === null || typeof spec !== 'object') throw new JobQueueError('JQ_INVALID_SPEC', 'a job spec must be an object');
        const { identifier, payload, ...rest } = spec;
        return this.validate(identifier, payload, rest);
      } catch (error) {
        JobQueueError.rethrowAt(`addMany, job ${index}`, error);
      }
    });
    if (jobs.length === 0) return [];
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
    const rows = keyed
      ? await this.db.run<JobRow>('addJobsKeyed', [...columns, jobs.map((j) => j.jobKey), jobs.map((j) => j.jobKeyMode)], options.manager)
      : await this.db.run<JobRow>('addJobsBulk', columns, options.manager);
    return rows.map((row) => toJob(row));
  }

  async getJob<Payload = unknown>(id: string): Promise<Job<Payload> | null> {
    const [jobId] = validateJobIds([id]);
    const rows = await this.db.run<JobRow>('getJob', [jobId]);
    return rows[0] ? toJob<Payload>(rows[0]) : null;
  }

  /** Deletes the pending job with this key; a job a worker holds is left alone (null is returned). */
  async removeJob(jobKey: string): Promise<Job | null> {
    const key = optionalString(jobKey, 'JQ_INVALID_JOB_KEY', 'jobKey', LIMITS.jobKeyLength);
    if (key === null) throw new JobQueueError('JQ_INVALID_JOB_KEY', 'jobKey is required');
    const rows = await this.db.run<JobRow>('removeJob', [key]);
    return rows[0] ? toJob(rows[0]) : null;
  }

  /** Marks jobs as done (deletes them). Jobs a worker holds are skipped. Returns the jobs completed. */
  async completeJobs(ids: string[]): Promise<Job[]> {
    const rows = await this.db.run<JobRow>('completeJobs', [validateJobIds(ids)]);
    return rows.map((row) => toJob(row));
  }

  /** Fails jobs for good, keeping them with `reason` as their error. Jobs a worker holds are skipped. */
  async permanentlyFailJobs(ids: string[], reason?: string): Promise<Job[]> {
    if (reason !== undefined && typeof reason !== 'string') throw new JobQueueError('JQ_INVALID_SPEC', 'reason must be a string');
    const rows = await this.db.run<JobRow>('permanentlyFailJobs', [validateJobIds(ids), reason ?? null]);
    return rows.map((row) => toJob(row));
  }

  /** Changes when and how jobs run. Jobs a worker holds are skipped. */
  async rescheduleJobs(ids: string[], options: RescheduleOptions): Promise<Job[]> {
    const jobIds = validateJobIds(ids);
    const { runAt, priority, attempts, maxAttempts } = options ?? {};
    validateJob('reschedule', undefined, { runAt, priority, maxAttempts });
    optionalSmallint(attempts, 'JQ_INVALID_SPEC', 'attempts', 0);
    const rows = await this.db.run<JobRow>('rescheduleJobs', [
      jobIds,
      runAt ?? null,
      priority ?? null,
      attempts ?? null,
      maxAttempts ?? null,
    ]);
    return rows.map((row) => toJob(row));
  }

  /**
   * A TypeORM repository over the jobs table, for reads (find, count, query builder).
   * The job entities must be registered in the DataSource (see the README).
   */
  jobRepository<Entity extends ObjectLiteral = ObjectLiteral>(): Repository<Entity> {
    const { dataSource, options } = this.db;
    const metadata = dataSource.entityMetadatas.find((m) => m.tablePath === `${options.schema}.jobs`);
    if (!metadata) {
      throw new JobQueueError(
        'JQ_ENTITIES_NOT_REGISTERED',
        `no entity for ${options.schema}.jobs in the DataSource: add JobQueueEntities (or createJobQueueEntities('${options.schema}')) to its entities`,
      );
    }
    return dataSource.getRepository<Entity>(metadata.target);
  }

  /** Task options fill in what the spec leaves out; the task must be one this app knows. */
  private validate(identifier: string, payload: unknown, spec: Omit<JobSpec, 'manager'> & { manager?: unknown }): ValidJob {
    const task = typeof identifier === 'string' ? this.tasks.get(identifier) : undefined;
    const defaults = task?.options;
    const { manager: _manager, ...rest } = spec ?? {};
    const job = validateJob(identifier, payload, {
      ...rest,
      queueName: rest.queueName ?? defaults?.queueName,
      priority: rest.priority ?? defaults?.priority,
      maxAttempts: rest.maxAttempts ?? defaults?.maxAttempts,
    });
    const { externalTasks } = this.db.options;
    if (!task && externalTasks !== '*' && !externalTasks.has(job.identifier)) {
      throw new JobQueueError(
        'JQ_UNKNOWN_TASK',
        `no @Task('${job.identifier}') in this app: check the name, or list it in the externalTasks option if another app runs it`,
      );
    }
    return job;
  }
}
