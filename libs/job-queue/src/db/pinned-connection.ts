import type { QueryResultRow } from 'pg';
import type { Statement } from './job-queue-database';

/**
 * What maintenance and the cron scheduler get of this process's worker: its id, and its
 * pinned connection (the LISTEN one, which handlers cannot take from it), so that a pool full
 * of handlers never holds their statements up. worker/membership.ts provides it; an
 * abstract class, so that it is its own injection token.
 */
export abstract class PinnedConnection {
  /** The worker's id in `workers` (it changes when the worker is fenced and rejoins). */
  abstract readonly workerId: string;
  /** Runs one statement on the pinned connection (on the pool while it reconnects). */
  abstract run<Row extends QueryResultRow = QueryResultRow>(statement: Statement, values: unknown[]): Promise<Row[]>;
}
