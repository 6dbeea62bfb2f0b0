import type { Client } from 'pg';
import { waitFor } from './wait';

/** A tick's job: when it was due (`ts`), added (`createdAt`), its id and whether it was backfilled. */
export interface TickJob {
  id: string;
  ts: number;
  createdAt: number;
  backfilled: boolean;
}

/**
 * The jobs schedule `id`'s ticks added, finished or not (their job key is `cron:<id>:<tick>`),
 * oldest tick first.
 */
export async function tickJobs(sql: Pick<Client, 'query'>, id: string): Promise<TickJob[]> {
  const { rows } = await sql.query<{ id: string; ts: string; created_at: Date; backfilled: string }>(
    `select id::text, payload->'_cron'->>'ts' as ts, created_at, payload->'_cron'->>'backfilled' as backfilled
     from (select id, payload, created_at, key from job_queue.jobs union all select id, payload, created_at, key from job_queue.finished_jobs) j
     where key like 'cron:' || $1 || ':%'
     order by 2, 1`,
    [id],
  );
  return rows.map((row) => ({ id: row.id, ts: Date.parse(row.ts), createdAt: row.created_at.getTime(), backfilled: row.backfilled === 'true' }));
}

/** Resolves once schedule `id` has `count` ticks due after `after` (ms). */
export async function ticksAfter(sql: Pick<Client, 'query'>, id: string, after: number, count: number, why = ''): Promise<TickJob[]> {
  let seen: TickJob[] = [];
  await waitFor(
    () => `${count} tick(s) of ${id} after ${new Date(after).toISOString()}${why}; seen ${seen.map((t) => new Date(t.ts).toISOString()).join(', ')}`,
    async () => (seen = (await tickJobs(sql, id)).filter((t) => t.ts > after)).length >= count,
  );
  return seen;
}

/** Checks one job per tick: no tick twice. */
export function distinctTicks(ticks: TickJob[]): boolean {
  return new Set(ticks.map((t) => t.ts)).size === ticks.length;
}
