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

/**
 * What limits a task's claims, all sources merged (control/task-limits.ts); an absent key is no
 * limit. The group limits apply to each `group` of the task's jobs apart (a job without a group
 * is in none, limited only by the task's own limits).
 */
export interface EffectiveLimits {
  concurrency?: number;
  rate?: CheckedRate;
  groupConcurrency?: number;
  groupRate?: CheckedRate;
}

/** The limits `setTaskLimits` takes: each key given overrides the decorator's value; null removes that limit. */
export interface TaskLimitsOverride {
  globalConcurrency?: number | null;
  rateLimit?: RateLimit | null;
  groupConcurrency?: number | null;
  groupRateLimit?: RateLimit | null;
}

/** An override as it is stored (`task_limits.limits`) and read back: rates in ms. */
export interface StoredLimits {
  globalConcurrency?: number | null;
  rateLimit?: CheckedRate | null;
  groupConcurrency?: number | null;
  groupRateLimit?: CheckedRate | null;
}

/** Each limit's name in `@Task` options and setTaskLimits, how it is checked, and its key in EffectiveLimits. */
const LIMIT_KEYS = {
  globalConcurrency: { effective: 'concurrency', check: (name: string, value: unknown, where: string) => checkConcurrencyLimit(name, value, where) },
  rateLimit: { effective: 'rate', check: (name: string, value: unknown, where: string) => checkRateLimit(name, value, where) },
  groupConcurrency: { effective: 'groupConcurrency', check: (name: string, value: unknown, where: string) => checkConcurrencyLimit(name, value, where) },
  groupRateLimit: { effective: 'groupRate', check: (name: string, value: unknown, where: string) => checkRateLimit(name, value, where) },
} as const satisfies Record<keyof StoredLimits, { effective: keyof EffectiveLimits; check: (name: string, value: unknown, where: string) => unknown }>;

type LimitName = keyof typeof LIMIT_KEYS;
const LIMIT_NAMES = Object.keys(LIMIT_KEYS) as LimitName[];

/** Checks the limits a `@Task` declares (JQ_INVALID_LIMIT, naming `where`), as the claim uses them. */
export function checkDeclaredLimits(options: Partial<Record<LimitName, unknown>>, where: string): EffectiveLimits {
  const limits: Record<string, unknown> = {};
  for (const name of LIMIT_NAMES) {
    if (options[name] !== undefined) limits[LIMIT_KEYS[name].effective] = LIMIT_KEYS[name].check(name, options[name], where);
  }
  return limits as EffectiveLimits;
}

/** Whether starts are counted (the task's own rate or its groups'): the task is claimed only into free slots (worker/limited-claim.ts). */
export function isRated(limits: EffectiveLimits): boolean {
  return limits.rate !== undefined || limits.groupRate !== undefined;
}

/** Whether the task limits each group of its jobs (its claim takes them by group: sql/group-claim.ts). */
export function isGrouped(limits: EffectiveLimits): boolean {
  return limits.groupConcurrency !== undefined || limits.groupRate !== undefined;
}

/** Whether the task's limit is leased rather than counted at each claim: a concurrency limit and nothing else (worker/slot-leases.ts). */
export function isLeased(limits: EffectiveLimits | undefined): limits is EffectiveLimits & { concurrency: number } {
  return limits?.concurrency !== undefined && !isRated(limits) && !isGrouped(limits);
}

/** Whether any limit is set: the task is claimed apart (worker/limited-claim.ts). */
export function hasLimits(limits: EffectiveLimits): boolean {
  return Object.values(limits).some((value) => value !== undefined);
}

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
  const given = value as Record<string, unknown>;
  const unknown = Object.keys(given).filter((key) => !(LIMIT_NAMES as string[]).includes(key));
  if (unknown.length > 0) throw new JobQueueError('JQ_INVALID_LIMIT', `${where}: unknown limit ${unknown.join(', ')} (${LIMIT_NAMES.join(', ')} are)`);
  const stored: Record<string, unknown> = {};
  for (const name of LIMIT_NAMES) {
    if (given[name] !== undefined) stored[name] = given[name] === null ? null : LIMIT_KEYS[name].check(name, given[name], where);
  }
  if (Object.keys(stored).length === 0) throw new JobQueueError('JQ_INVALID_LIMIT', `${where}: no limit given (${LIMIT_NAMES.join(', ')}; resetTaskLimits goes back to the decorator's)`);
  return stored as StoredLimits;
}

/** The decorator's limits with an override over them: a key the override has replaces the decorator's, null removing it. */
export function mergeLimits(declared: EffectiveLimits, override: StoredLimits | undefined): EffectiveLimits {
  if (!override) return declared;
  const merged: Record<string, unknown> = { ...declared };
  for (const name of LIMIT_NAMES) {
    const value = override[name];
    if (value === undefined) continue;
    if (value === null) delete merged[LIMIT_KEYS[name].effective];
    else merged[LIMIT_KEYS[name].effective] = value;
  }
  return merged as EffectiveLimits;
}

function describe(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : value !== null && typeof value === 'object' ? JSON.stringify(value) : String(value);
}
