import { Column, Entity, PrimaryColumn } from 'typeorm';

/**
 * TypeORM entities over the job tables, for reading jobs through repositories.
 * `synchronize: false`: the tables belong to the migrations, never to `synchronize`.
 * The hot path does not use them; it runs hand-written SQL (see sql/, one file per operation).
 *
 * Entities carry their schema in their metadata, so they are made per schema; make them
 * once per schema and share the result.
 */
/** The columns `jobs` and `finished_jobs` share: TypeORM maps both entities' tables with them. */
abstract class JobColumns {
  @PrimaryColumn({ type: 'bigint' }) id!: string;
  @Column({ name: 'task_identifier', type: 'text' }) taskIdentifier!: string;
  @Column({ name: 'queue_name', type: 'text', nullable: true }) queueName!: string | null;
  @Column({ type: 'jsonb' }) payload!: unknown;
  @Column({ type: 'smallint' }) priority!: number;
  @Column({ name: 'run_at', type: 'timestamptz' }) runAt!: Date;
  @Column({ type: 'smallint' }) attempts!: number;
  @Column({ name: 'max_attempts', type: 'smallint' }) maxAttempts!: number;
  @Column({ name: 'last_error', type: 'text', nullable: true }) lastError!: string | null;
  @Column({ type: 'text', nullable: true }) key!: string | null;
  @Column({ type: 'text', array: true }) flags!: string[];
  @Column({ type: 'jsonb', nullable: true }) progress!: unknown;
  @Column({ type: 'jsonb', nullable: true }) errors!: unknown[] | null;
  @Column({ name: 'created_at', type: 'timestamptz' }) createdAt!: Date;
  @Column({ name: 'started_at', type: 'timestamptz', nullable: true }) startedAt!: Date | null;
  /** Its flow (addFlow's); null for a job added alone, whose flow is itself. */
  @Column({ name: 'flow_id', type: 'bigint', nullable: true }) flowId!: string | null;
  @Column({ name: 'flow_ref', type: 'text', nullable: true }) flowRef!: string | null;
}

export function createJobQueueEntities(schema = 'job_queue') {
  /** Unfinished jobs. */
  @Entity({ schema, name: 'jobs', synchronize: false })
  class JobEntity extends JobColumns {
    @Column({ type: 'integer' }) revision!: number;
    @Column({ name: 'locked_at', type: 'timestamptz', nullable: true }) lockedAt!: Date | null;
    @Column({ name: 'locked_by', type: 'text', nullable: true }) lockedBy!: string | null;
    @Column({ name: 'updated_at', type: 'timestamptz' }) updatedAt!: Date;
    @Column({ name: 'first_run_at', type: 'timestamptz', nullable: true }) firstRunAt!: Date | null;
    @Column({ name: 'cancel_requested_at', type: 'timestamptz', nullable: true }) cancelRequestedAt!: Date | null;
    @Column({ name: 'cancel_reason', type: 'text', nullable: true }) cancelReason!: string | null;
    @Column({ name: 'is_available', type: 'boolean', insert: false, update: false }) isAvailable!: boolean;
  }

  /** Jobs that completed, failed for good or were cancelled, kept for their retention. */
  @Entity({ schema, name: 'finished_jobs', synchronize: false })
  class FinishedJobEntity extends JobColumns {
    @Column({ type: 'text' }) state!: 'completed' | 'failed' | 'cancelled';
    @Column({ type: 'jsonb', nullable: true }) result!: unknown;
    @Column({ name: 'worker_id', type: 'text', nullable: true }) workerId!: string | null;
    @Column({ name: 'finished_at', type: 'timestamptz' }) finishedAt!: Date;
  }

  @Entity({ schema, name: 'job_queues', synchronize: false })
  class JobQueueEntity {
    @PrimaryColumn({ name: 'queue_name', type: 'text' }) queueName!: string;
    @Column({ name: 'locked_at', type: 'timestamptz', nullable: true }) lockedAt!: Date | null;
    @Column({ name: 'locked_by', type: 'text', nullable: true }) lockedBy!: string | null;
  }

  @Entity({ schema, name: 'known_crontabs', synchronize: false })
  class KnownCrontabEntity {
    @PrimaryColumn({ type: 'text' }) identifier!: string;
    @Column({ name: 'known_since', type: 'timestamptz' }) knownSince!: Date;
    @Column({ name: 'last_execution', type: 'timestamptz', nullable: true }) lastExecution!: Date | null;
    @Column({ name: 'task_identifier', type: 'text', nullable: true }) taskIdentifier!: string | null;
    @Column({ type: 'text', nullable: true }) expression!: string | null;
    @Column({ name: 'time_zone', type: 'text', nullable: true }) timeZone!: string | null;
    @Column({ name: 'registered_at', type: 'timestamptz', nullable: true }) registeredAt!: Date | null;
    /** `code` (@Cron, crontab) or `runtime` (upsertSchedule). */
    @Column({ type: 'text' }) kind!: 'code' | 'runtime';
    @Column({ name: 'every_ms', type: 'bigint', nullable: true }) everyMs!: string | null;
    @Column({ type: 'jsonb', nullable: true }) payload!: Record<string, unknown> | null;
    @Column({ name: 'queue_name', type: 'text', nullable: true }) queueName!: string | null;
    @Column({ type: 'integer', nullable: true }) priority!: number | null;
    @Column({ name: 'max_attempts', type: 'integer', nullable: true }) maxAttempts!: number | null;
    @Column({ name: 'backfill_ms', type: 'bigint', nullable: true }) backfillMs!: string | null;
    @Column({ name: 'paused_at', type: 'timestamptz', nullable: true }) pausedAt!: Date | null;
    @Column({ name: 'resumed_at', type: 'timestamptz', nullable: true }) resumedAt!: Date | null;
    @Column({ type: 'bigint' }) revision!: string;
    @Column({ name: 'updated_at', type: 'timestamptz', nullable: true }) updatedAt!: Date | null;
  }

  @Entity({ schema, name: 'workers', synchronize: false })
  class WorkerEntity {
    @PrimaryColumn({ type: 'text' }) id!: string;
    @Column({ name: 'started_at', type: 'timestamptz' }) startedAt!: Date;
    @Column({ name: 'heartbeat_at', type: 'timestamptz' }) heartbeatAt!: Date;
    @Column({ name: 'timeout_ms', type: 'integer' }) timeoutMs!: number;
    @Column({ type: 'text', nullable: true }) hostname!: string | null;
    @Column({ type: 'integer', nullable: true }) pid!: number | null;
    @Column({ type: 'integer', nullable: true }) concurrency!: number | null;
  }

  /** A flow's jobs waiting for their dependencies (state `blocked`). */
  @Entity({ schema, name: 'blocked_jobs', synchronize: false })
  class BlockedJobEntity {
    @PrimaryColumn({ type: 'bigint' }) id!: string;
    @Column({ name: 'task_identifier', type: 'text' }) taskIdentifier!: string;
    @Column({ name: 'queue_name', type: 'text', nullable: true }) queueName!: string | null;
    @Column({ type: 'jsonb' }) payload!: unknown;
    @Column({ type: 'smallint' }) priority!: number;
    @Column({ name: 'run_at', type: 'timestamptz', nullable: true }) runAt!: Date | null;
    @Column({ name: 'max_attempts', type: 'smallint' }) maxAttempts!: number;
    @Column({ type: 'text', array: true }) flags!: string[];
    @Column({ name: 'flow_id', type: 'bigint' }) flowId!: string;
    @Column({ name: 'flow_ref', type: 'text', nullable: true }) flowRef!: string | null;
    /** How many of its dependencies have not ended yet. */
    @Column({ type: 'integer' }) pending!: number;
    @Column({ name: 'created_at', type: 'timestamptz' }) createdAt!: Date;
  }

  /** One edge of a flow: job `jobId` waits for `dependencyId` (its step `dependencyRef`). */
  @Entity({ schema, name: 'job_dependencies', synchronize: false })
  class JobDependencyEntity {
    @PrimaryColumn({ name: 'job_id', type: 'bigint' }) jobId!: string;
    /** The dependent's own ref. */
    @Column({ name: 'job_ref', type: 'text', nullable: true }) jobRef!: string | null;
    @PrimaryColumn({ name: 'dependency_ref', type: 'text' }) dependencyRef!: string;
    @Column({ name: 'dependency_id', type: 'bigint' }) dependencyId!: string;
    @Column({ name: 'flow_id', type: 'bigint' }) flowId!: string;
    @Column({ type: 'text' }) policy!: 'fail' | 'ignore' | 'continue';
    @Column({ type: 'text', nullable: true }) state!: 'completed' | 'failed' | 'cancelled' | null;
    @Column({ type: 'jsonb', nullable: true }) result!: unknown;
    @Column({ type: 'text', nullable: true }) error!: string | null;
    @Column({ name: 'settled_at', type: 'timestamptz', nullable: true }) settledAt!: Date | null;
  }

  @Entity({ schema, name: 'flows', synchronize: false })
  class FlowEntity {
    @PrimaryColumn({ type: 'bigint' }) id!: string;
    @Column({ type: 'text' }) state!: 'running' | 'completed' | 'failed' | 'cancelled';
    /** How many of its jobs have not finished. */
    @Column({ type: 'integer' }) unfinished!: number;
    @Column({ name: 'created_at', type: 'timestamptz' }) createdAt!: Date;
    @Column({ name: 'updated_at', type: 'timestamptz' }) updatedAt!: Date;
    @Column({ name: 'finished_at', type: 'timestamptz', nullable: true }) finishedAt!: Date | null;
  }

  return { JobEntity, FinishedJobEntity, JobQueueEntity, KnownCrontabEntity, WorkerEntity, BlockedJobEntity, JobDependencyEntity, FlowEntity };
}

const defaultEntities = createJobQueueEntities();
/** Entities of the default schema `job_queue`. */
export const JobEntity = defaultEntities.JobEntity;
export type JobEntity = InstanceType<typeof JobEntity>;
export const FinishedJobEntity = defaultEntities.FinishedJobEntity;
export type FinishedJobEntity = InstanceType<typeof FinishedJobEntity>;
export const JobQueueEntity = defaultEntities.JobQueueEntity;
export type JobQueueEntity = InstanceType<typeof JobQueueEntity>;
export const KnownCrontabEntity = defaultEntities.KnownCrontabEntity;
export type KnownCrontabEntity = InstanceType<typeof KnownCrontabEntity>;
export const WorkerEntity = defaultEntities.WorkerEntity;
export type WorkerEntity = InstanceType<typeof WorkerEntity>;
export const BlockedJobEntity = defaultEntities.BlockedJobEntity;
export type BlockedJobEntity = InstanceType<typeof BlockedJobEntity>;
export const JobDependencyEntity = defaultEntities.JobDependencyEntity;
export type JobDependencyEntity = InstanceType<typeof JobDependencyEntity>;
export const FlowEntity = defaultEntities.FlowEntity;
export type FlowEntity = InstanceType<typeof FlowEntity>;
/** For `TypeOrmModule.forRoot({ entities: [...JobQueueEntities] })` or `forFeature(JobQueueEntities)`. */
export const JobQueueEntities = Object.values(defaultEntities);
