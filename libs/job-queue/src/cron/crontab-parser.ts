import JSON5 from 'json5';
import { JobQueueError } from '../core/errors';
import type { CronItemSpec } from './cron-item';
import { parseDuration } from '../core/duration';

/**
 * Parses graphile-worker's crontab syntax, one schedule per line:
 *
 *   <min> <hour> <day of month> <month> <day of week> <task> [?opts] [{json5 payload}]
 *
 * in UTC. Options: id (the schedule's identifier, default the task), fill (backfill
 * period, e.g. 2d), max (maxAttempts), queue, priority. The payload is JSON5, as graphile-worker
 * reads it (`{to: 'ops', retries: 2,}`). Blank lines and # comments are skipped.
 */
export function parseCrontab(text: string): CronItemSpec[] {
  const specs: CronItemSpec[] = [];
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    const source = `crontab line ${index + 1}`;
    const fail = (why: string): never => {
      throw new JobQueueError('JQ_INVALID_CRONTAB', `${source} '${line}': ${why}`);
    };
    const match = /^(\S+\s+\S+\s+\S+\s+\S+\s+\S+)\s+([^\s?{]+)(?:\s+\?(\S*))?(?:\s+(\{.*\}))?$/.exec(line);
    if (!match) fail('expected five time fields, a task identifier, then optionally ?options and a {json5} payload');
    const [, expression, task, query, json] = match!;

    const spec: CronItemSpec = { identifier: task, task, expression, timeZone: 'UTC', source };
    for (const [key, value] of new URLSearchParams(query ?? '')) {
      if (key === 'id') spec.identifier = value;
      else if (key === 'fill') spec.backfillPeriod = parseDuration(value) ?? fail(`fill must be a period such as 2d or 1h30m, got '${value}'`);
      else if (key === 'max') spec.maxAttempts = integer(value, key, fail);
      else if (key === 'priority') spec.priority = integer(value, key, fail);
      else if (key === 'queue') spec.queueName = value;
      else fail(`unknown option '${key}' (known: id, fill, max, queue, priority)`);
    }
    if (json !== undefined) {
      let payload: unknown;
      try {
        payload = JSON5.parse(json);
      } catch (error) {
        fail(`the payload is not valid JSON5: ${(error as Error).message}`);
      }
      if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) fail('the payload must be a JSON object');
      spec.payload = payload as Record<string, unknown>;
    }
    specs.push(spec);
  });
  return specs;
}

function integer(value: string, key: string, fail: (why: string) => never): number {
  if (!/^-?\d+$/.test(value)) fail(`option ${key} must be an integer, got '${value}'`);
  return Number(value);
}
