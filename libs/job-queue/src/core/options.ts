import type { DataSource, DataSourceOptions } from 'typeorm';
import { checkDuration, DAY_MS } from './duration';
import { DEFAULT_MAX_JSON_BYTES, MAX_JSON_BYTES_LIMIT } from './json';
import { JobQueueError } from './errors';
import { validateTaskIdentifier } from './validate-job-spec';
import { validateSchemaName } from './schema-name';
import type { JobMiddleware } from './middleware';
import { resolvePoolingOptions, type PoolingOptions, type ResolvedPoolingOptions } from './pooling-options';

type PostgresDataSourceOptions = Extract<DataSourceOptions, { type: 'postgres' }>;

export type ForbiddenFlags = string[] | (() => string[] | Promise<string[]>);

/** How long finished jobs are kept, per state: ms or a duration string; 0 keeps none, null keeps them forever. */
export interface RetentionOptions {
  /** Default 24h. 0: a completed job is deleted as it completes (no history, no result for waitForJob). */
  completed?: number | string | null;
  /** Default 7d. */
  failed?: number | string | null;
  /** Default 7d. */
  cancelled?: number | string | null;
}

/** Retention in ms per finished state; null: kept forever. */
export interface Retention {
  completed: number | null;
  failed: number | null;
  cancelled: number | null;
}

const DEFAULT_RETENTION: Retention = { completed: DAY_MS, failed: 7 * DAY_MS, cancelled: 7 * DAY_MS };
/** The longest retention short of forever (null): ten years. */
const MAX_RETENTION_MS = 3650 * DAY_MS;

export interface JobQueueModuleOptions extends PoolingOptions {
  /** Schema of the job tables. Default `job_queue`. A plain identifier, at most 50 characters. */
  schema?: string;
  /** A DataSource to use (initialised by the module if it is not yet). Takes precedence. */
  dataSource?: DataSource;
  /** The name of a `@nestjs/typeorm` DataSource (`TypeOrmModule.forRoot({ name })`). */
  dataSourceName?: string;
  /**
   * Connection options for a DataSource of the module's own, for apps without
   * `@nestjs/typeorm`. Used only when neither of the above is given and the app has no
   * default `@nestjs/typeorm` DataSource.
   */
  connection?: Omit<PostgresDataSourceOptions, 'type'>;
  /** Apply pending migrations at startup, under an advisory lock. Default true. */
  migrationsRun?: boolean;
  /** Run a worker in this process. Default true; false makes a producer-only instance. */
  worker?: boolean;
  /**
   * A job this process adds outside a transaction, due now and in no named queue, starts in
   * this process's worker when that worker runs its task and has a free slot with nothing
   * claimed waiting: the insert claims it, so it starts without a NOTIFY and a claim. Default
   * true; false sends every job through the table to whichever worker claims it first.
   */
  localStart?: boolean;
  /** How many jobs this process runs at once. Default 10, or fewer to fit the pool: its size − 3 (the queue's own connections), at least 1. */
  concurrency?: number;
  /** Milliseconds between polls for future, retried or unnotified jobs. Default 2000. */
  pollInterval?: number;
  /** Milliseconds running jobs get to finish at shutdown before they are aborted and given back. Default 5000. */
  shutdownGracePeriod?: number;
  /**
   * How often this process's worker proves it is alive (ms, or a duration such as '5s').
   * Default 5s. Heartbeats use the worker's own connection, never the shared pool's.
   */
  heartbeatInterval?: number | string;
  /**
   * How long after a worker's last heartbeat it counts as dead: its running jobs are
   * then retried elsewhere (an attempt charged, JQ_WORKER_LOST), its claimed-but-unstarted
   * ones put back. Default 20s, at least twice heartbeatInterval. A handler that stalls its
   * process (or a partition) for longer may run twice: see docs/guarantees.md (delivery guarantees).
   */
  workerTimeout?: number | string;
  /** Default timeout of a job's attempt (ms or a duration); `@Task({ timeout })` overrides it. None unless set. */
  jobTimeout?: number | string;
  /** Jobs carrying any of these flags are not claimed by this process. */
  forbiddenFlags?: ForbiddenFlags;
  /** Recurring jobs in graphile-worker's crontab syntax, one per line. */
  crontab?: string;
  /**
   * Task identifiers that another app handles, which this one may add jobs for. Adding a job
   * for an identifier with no `@Task` in this app and not listed here fails with
   * JQ_UNKNOWN_TASK, so that a typo does not leave jobs that nothing will ever run. `'*'`
   * accepts any identifier (a producer that knows none of the handlers).
   */
  externalTasks?: string[] | '*';
  /**
   * How long finished jobs stay in `finished_jobs` (and getJob, listJobs, waitForJob see
   * them), per state. The maintenance leader deletes them after. Defaults: completed 24h,
   * failed and cancelled 7d.
   */
  retention?: RetentionOptions;
  /** The largest payload (at add) and result (a handler's return value), in bytes of JSON. Default 1 MiB, at most 32 MiB (MAX_JSON_BYTES_LIMIT). */
  maxJsonBytes?: number;
  /**
   * OpenTelemetry traces and metrics through `@opentelemetry/api`, when the app has that
   * package (they record only once the app registers an SDK). Default true; false turns
   * them off even then.
   */
  telemetry?: boolean;
  /** Functions that wrap every handler, the first outermost (see JobMiddleware). */
  middleware?: JobMiddleware[];
  /**
   * The maintenance leader VACUUMs the jobs table whenever enough of its rows died (10,000,
   * and 5 % of the live ones), so that claims do not slow down over a long drain. Default
   * true; false leaves it to autovacuum. It needs a role that may vacuum the table (its owner, or
   * from PostgreSQL 17 one with MAINTAIN on it).
   */
  vacuumJobs?: boolean;
}

/** The token of the resolved options (what every part of the library reads), provided once by the module. */
export const JOB_QUEUE_OPTIONS = Symbol('nestjs-job-queue resolved options');

/** The module's options, checked and with their defaults, frozen: nothing changes them after startup. */
export interface ResolvedJobQueueOptions extends ResolvedPoolingOptions {
  schema: string;
  /** Where the DataSource comes from, as given (db/job-queue-database.ts finds it). */
  dataSource?: DataSource;
  dataSourceName?: string;
  connection?: Omit<PostgresDataSourceOptions, 'type'>;
  migrationsRun: boolean;
  worker: boolean;
  localStart: boolean;
  /** As given; when not given, the worker sizes it to the pool it finds (db/pool-size.ts concurrencyForPool). */
  concurrency?: number;
  pollInterval: number;
  shutdownGracePeriod: number;
  heartbeatInterval: number;
  workerTimeout: number;
  jobTimeout?: number;
  forbiddenFlags?: ForbiddenFlags;
  crontab?: string;
  externalTasks: ReadonlySet<string> | '*';
  retention: Retention;
  maxJsonBytes: number;
  telemetry: boolean;
  middleware: readonly JobMiddleware[];
  vacuumJobs: boolean;
}

/** Whether a completed job is kept in finished_jobs (retention.completed is not 0): the release and a transactional completion write it there, or delete it. */
export function keepsCompleted(options: ResolvedJobQueueOptions): boolean {
  return options.retention.completed !== 0;
}

function resolveRetention(options: unknown): Retention {
  if (options === undefined) return DEFAULT_RETENTION;
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new JobQueueError('JQ_INVALID_OPTIONS', 'retention must be an object: { completed, failed, cancelled }');
  }
  const given = options as Record<string, unknown>;
  const unknown = Object.keys(given).filter((key) => !(key in DEFAULT_RETENTION));
  if (unknown.length > 0) throw new JobQueueError('JQ_INVALID_OPTIONS', `retention has no option ${unknown.join(', ')}: use completed, failed, cancelled`);
  const one = (state: keyof Retention): number | null => {
    const value = given[state];
    if (value === undefined) return DEFAULT_RETENTION[state];
    if (value === null) return null;
    return checkDuration(`retention.${state}`, value, 0, 'JQ_INVALID_OPTIONS', undefined, MAX_RETENTION_MS);
  };
  return { completed: one('completed'), failed: one('failed'), cancelled: one('cancelled') };
}

/** An integer option from 1 to `max`, or `fallback` when it is not set; `why` says where `max` comes from. */
function positiveInteger<Fallback extends number | undefined>(name: string, value: unknown, fallback: Fallback, max: number, why = ''): number | Fallback {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    throw new JobQueueError('JQ_INVALID_OPTIONS', `${name} must be an integer from 1 to ${max}${why}, got ${String(value)}`);
  }
  return value;
}

/** A duration option, or `fallback` when it is not set. */
function durationOption(name: string, value: unknown, fallback: number | undefined, min: number): number | undefined {
  return value === undefined ? fallback : checkDuration(name, value, min, 'JQ_INVALID_OPTIONS');
}

/** Checks the module options once, at startup, and fills in the defaults. */
export function resolveOptions(options: JobQueueModuleOptions): Readonly<ResolvedJobQueueOptions> {
  const { forbiddenFlags, crontab, externalTasks = [] } = options;
  if (
    forbiddenFlags !== undefined &&
    typeof forbiddenFlags !== 'function' &&
    !(Array.isArray(forbiddenFlags) && forbiddenFlags.every((flag) => typeof flag === 'string'))
  ) {
    throw new JobQueueError('JQ_INVALID_OPTIONS', 'forbiddenFlags must be an array of strings or a function');
  }
  const { middleware = [] } = options;
  if (!Array.isArray(middleware) || !middleware.every((wrap) => typeof wrap === 'function')) {
    throw new JobQueueError('JQ_INVALID_OPTIONS', 'middleware must be an array of functions (ctx, next) => Promise<unknown>');
  }
  if (crontab !== undefined && typeof crontab !== 'string') {
    throw new JobQueueError('JQ_INVALID_OPTIONS', 'crontab must be a string');
  }
  if (externalTasks !== '*') {
    if (!Array.isArray(externalTasks)) throw new JobQueueError('JQ_INVALID_OPTIONS', `externalTasks must be an array of task identifiers or '*'`);
    for (const identifier of externalTasks) {
      try {
        validateTaskIdentifier(identifier);
      } catch (error) {
        JobQueueError.rethrowAt('externalTasks', error, 'JQ_INVALID_OPTIONS');
      }
    }
  }
  for (const name of ['migrationsRun', 'worker', 'localStart', 'telemetry', 'vacuumJobs'] as const) {
    if (options[name] !== undefined && typeof options[name] !== 'boolean') {
      throw new JobQueueError('JQ_INVALID_OPTIONS', `${name} must be a boolean`);
    }
  }
  const heartbeatInterval = durationOption('heartbeatInterval', options.heartbeatInterval, 5_000, 100)!;
  const workerTimeout = durationOption('workerTimeout', options.workerTimeout, Math.max(20_000, 2 * heartbeatInterval), 1_000)!;
  if (workerTimeout < 2 * heartbeatInterval) {
    throw new JobQueueError(
      'JQ_INVALID_OPTIONS',
      `workerTimeout (${workerTimeout} ms) must be at least twice heartbeatInterval (${heartbeatInterval} ms), so that one late heartbeat does not make a worker dead`,
    );
  }
  return Object.freeze({
    ...resolvePoolingOptions(options),
    dataSource: options.dataSource,
    dataSourceName: options.dataSourceName,
    connection: options.connection,
    heartbeatInterval,
    workerTimeout,
    jobTimeout: durationOption('jobTimeout', options.jobTimeout, undefined, 1),
    schema: validateSchemaName(options.schema ?? 'job_queue'),
    migrationsRun: options.migrationsRun ?? true,
    worker: options.worker ?? true,
    localStart: options.localStart ?? true,
    telemetry: options.telemetry ?? true,
    vacuumJobs: options.vacuumJobs ?? true,
    middleware,
    concurrency: positiveInteger('concurrency', options.concurrency, undefined, 1000),
    pollInterval: positiveInteger('pollInterval', options.pollInterval, 2000, 3_600_000),
    shutdownGracePeriod: positiveInteger('shutdownGracePeriod', options.shutdownGracePeriod, 5000, 3_600_000),
    forbiddenFlags,
    crontab,
    externalTasks: externalTasks === '*' ? '*' : new Set(externalTasks),
    retention: Object.freeze(resolveRetention(options.retention)),
    maxJsonBytes: positiveInteger(
      'maxJsonBytes',
      options.maxJsonBytes,
      DEFAULT_MAX_JSON_BYTES,
      MAX_JSON_BYTES_LIMIT,
      ` (${MAX_JSON_BYTES_LIMIT / 1_048_576} MiB: the most JSON one release can write)`,
    ),
  });
}
