import { JobQueueError, type JobQueueErrorCode } from './errors';

export const DAY_MS = 86_400_000;

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/**
 * A period as milliseconds, or as graphile-worker's crontab writes it: `1w2d3h4m5s` (any
 * subset, in that order), with `ms` allowed last (`1s500ms`). The one parser for every
 * duration option: timeouts, heartbeats, backfill periods. Returns undefined when the text
 * is not such a period.
 */
export function parseDuration(value: number | string): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) && value >= 0 ? value : undefined;
  const match = /^(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$/.exec(value);
  if (!value || !match) return undefined;
  return ['w', 'd', 'h', 'm', 's'].reduce((ms, unit, i) => ms + Number(match[i + 1] ?? 0) * UNITS[unit], Number(match[6] ?? 0));
}

/**
 * A duration option checked at startup: ms, or a string such as '30s', from `min` ms up to
 * `max` (a day unless said). Throws `code` with a message naming `name` (and `where`, when given).
 */
export function checkDuration(name: string, value: unknown, min: number, code: JobQueueErrorCode, where?: string, max = DAY_MS): number {
  const ms = typeof value === 'number' || typeof value === 'string' ? parseDuration(value) : undefined;
  if (ms === undefined || ms < min || ms > max) {
    throw new JobQueueError(
      code,
      `${where ? `${where}: ` : ''}${name} must be a duration from ${min} ms to ${max === DAY_MS ? '1 day' : `${max / DAY_MS} days`} (ms, or a string such as '30s'), got ${JSON.stringify(value)}`,
    );
  }
  return Math.round(ms);
}
