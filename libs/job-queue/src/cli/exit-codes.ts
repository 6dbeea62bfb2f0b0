import type { JobQueueErrorCode } from '../core/errors';

/**
 * The bin's exit codes, part of its interface: a pipeline branches on them
 * (docs/guides/cli.md lists them). Add new ones; never renumber.
 */
export const EXIT = {
  ok: 0,
  /** validate: migrations are pending, or the schema differs from what this version expects. */
  notCurrent: 1,
  /** PostgreSQL could not be reached, or refused the login (JQ_DB_UNREACHABLE, JQ_DB_LOGIN_FAILED). */
  connection: 2,
  /** Bad usage or input: an unknown command or option, a bad URL, schema name, job id, state or limit. */
  usage: 3,
  /** The schema has no job tables (JQ_SCHEMA_MISSING): run `migrate` first. */
  schemaMissing: 4,
  /** A job action was refused for some of the ids given (unknown job, finished job, not retryable). */
  refused: 5,
  /** PostgreSQL refused a statement, or a migration failed (JQ_DB_ERROR, JQ_MIGRATION_FAILED). */
  database: 6,
  /** Anything else (JQ_INTERNAL): a bug of the bin. */
  internal: 7,
} as const;

const BY_CODE: Partial<Record<JobQueueErrorCode, number>> = {
  JQ_SCHEMA_OUTDATED: EXIT.notCurrent,
  JQ_DB_UNREACHABLE: EXIT.connection,
  JQ_DB_LOGIN_FAILED: EXIT.connection,
  JQ_SCHEMA_MISSING: EXIT.schemaMissing,
  JQ_JOB_NOT_FOUND: EXIT.refused,
  JQ_JOB_FINISHED: EXIT.refused,
  JQ_DB_ERROR: EXIT.database,
  JQ_MIGRATION_FAILED: EXIT.database,
  JQ_INTERNAL: EXIT.internal,
};

/** The exit code for an error's code: the input checks' codes (JQ_INVALID_*, JQ_BAD_*) are bad usage. */
export function exitCodeOf(code: JobQueueErrorCode): number {
  return BY_CODE[code] ?? EXIT.usage;
}

/** How a command's action hands its exit code to the program (program.ts). */
export type SetExitCode = (code: number) => void;
