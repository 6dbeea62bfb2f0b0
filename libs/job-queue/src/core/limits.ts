import { JobQueueError } from './errors';

/** The largest concurrency limit: a PostgreSQL integer. */
export const MAX_CONCURRENCY_LIMIT = 2_147_483_647;

/**
 * Checks a concurrency limit (`globalConcurrency`): a whole number of at least 1. Anything
 * else (zero, negative, fractional, not a number) is refused with JQ_INVALID_LIMIT, naming
 * `where` (the `@Task` it is on) so that the app refuses to start before anything is written.
 */
export function checkConcurrencyLimit(name: string, value: unknown, where: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_CONCURRENCY_LIMIT) {
    throw new JobQueueError('JQ_INVALID_LIMIT', `${where}: ${name} must be a whole number from 1 to ${MAX_CONCURRENCY_LIMIT}, got ${describe(value)}`);
  }
  return value;
}

function describe(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : String(value);
}
