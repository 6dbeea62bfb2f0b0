import { checkDuration } from './duration';
import { JobQueueError } from './errors';

/** The largest concurrency limit, and the largest rate `max`: a PostgreSQL integer. */
export const MAX_CONCURRENCY_LIMIT = 2_147_483_647;

/** The longest rate window, and the longest hold of `ctx.rateLimited`: 31 days. */
export const MAX_RATE_WINDOW_MS = 31 * 24 * 3_600_000;

/** A rate limit as a task declares it: at most `max` attempts started in any window of length `per` (ms, or a duration such as '1m'). */
export interface RateLimit {
  max: number;
  per: number | string;
}

/** A rate limit, checked: `per` in ms. */
export interface CheckedRate {
  max: number;
  perMs: number;
}

/** What limits a task's claims, all sources merged (control/task-limits.ts); an absent key is no limit. */
export interface EffectiveLimits {
  concurrency?: number;
  rate?: CheckedRate;
}

/** The limits `setTaskLimits` takes: each key given overrides the decorator's value; null removes that limit. */
export interface TaskLimitsOverride {
  globalConcurrency?: number | null;
  rateLimit?: RateLimit | null;
}

/** An override as it is stored (`task_limits.limits`) and read back: rates in ms. */
export interface StoredLimits {
  globalConcurrency?: number | null;
  rateLimit?: CheckedRate | null;
}

/** Limits named by the design that this release does not enforce yet: refused (by the task registry and setTaskLimits) rather than ignored. */
export const LIMITS_NOT_YET: readonly string[] = ['groupConcurrency', 'groupRateLimit'];

/**
 * Checks a concurrency limit (`globalConcurrency`): a whole number of at least 1. Anything
 * else (zero, negative, fractional, not a number) is refused with JQ_INVALID_LIMIT, naming
 * `where` (the `@Task` it is on, or the call) before anything is written.
 */
export function checkConcurrencyLimit(name: string, value: unknown, where: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_CONCURRENCY_LIMIT) {
    throw new JobQueueError('JQ_INVALID_LIMIT', `${where}: ${name} must be a whole number from 1 to ${MAX_CONCURRENCY_LIMIT}, got ${describe(value)}`);
  }
  return value;
}

/** Checks a rate limit `{ max, per }`: `max` as a concurrency limit, `per` a duration from 1 ms to 31 days (JQ_INVALID_LIMIT). */
export function checkRateLimit(name: string, value: unknown, where: string): CheckedRate {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new JobQueueError('JQ_INVALID_LIMIT', `${where}: ${name} must be an object { max, per }, got ${describe(value)}`);
  }
  const { max, per, ...rest } = value as Record<string, unknown>;
  const unknown = Object.keys(rest);
  if (unknown.length > 0) throw new JobQueueError('JQ_INVALID_LIMIT', `${where}: ${name} takes max and per, not ${unknown.join(', ')}`);
  return { max: checkConcurrencyLimit(`${name}.max`, max, where), perMs: checkDuration(`${name}.per`, per, 1, 'JQ_INVALID_LIMIT', where, MAX_RATE_WINDOW_MS) };
}

/** Checks what setTaskLimits was given: an object of known limits, each valid or null (JQ_INVALID_LIMIT). */
export function checkLimitsOverride(value: unknown, where: string): StoredLimits {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new JobQueueError('JQ_INVALID_LIMIT', `${where}: the limits must be an object such as { globalConcurrency: 5 }, got ${describe(value)}`);
  }
  const { globalConcurrency, rateLimit, ...rest } = value as Record<string, unknown>;
  const later = Object.keys(rest).filter((key) => LIMITS_NOT_YET.includes(key));
  if (later.length > 0) throw new JobQueueError('JQ_INVALID_LIMIT', `${where}: ${later.join(', ')} is not supported yet: see docs/guides/limits.md`);
  const unknown = Object.keys(rest);
  if (unknown.length > 0) throw new JobQueueError('JQ_INVALID_LIMIT', `${where}: unknown limit ${unknown.join(', ')} (globalConcurrency and rateLimit are)`);
  const stored: StoredLimits = {};
  if (globalConcurrency !== undefined) stored.globalConcurrency = globalConcurrency === null ? null : checkConcurrencyLimit('globalConcurrency', globalConcurrency, where);
  if (rateLimit !== undefined) stored.rateLimit = rateLimit === null ? null : checkRateLimit('rateLimit', rateLimit, where);
  if (Object.keys(stored).length === 0) throw new JobQueueError('JQ_INVALID_LIMIT', `${where}: no limit given (globalConcurrency or rateLimit; resetTaskLimits goes back to the decorator's)`);
  return stored;
}

/** The decorator's limits with an override over them: a key the override has replaces the decorator's, null removing it. */
export function mergeLimits(declared: EffectiveLimits, override: StoredLimits | undefined): EffectiveLimits {
  if (!override) return declared;
  const merged: EffectiveLimits = { ...declared };
  if (override.globalConcurrency !== undefined) merged.concurrency = override.globalConcurrency ?? undefined;
  if (override.rateLimit !== undefined) merged.rate = override.rateLimit ?? undefined;
  if (merged.concurrency === undefined) delete merged.concurrency;
  if (merged.rate === undefined) delete merged.rate;
  return merged;
}

function describe(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : value !== null && typeof value === 'object' ? JSON.stringify(value) : String(value);
}
