/**
 * Steering which worker process may claim what: a process started with FLAGS_TABLE=1
 * (worker-process.ts) reads its forbidden flags from the test's `forbidden_flags` table at
 * each claim, so a job added with a flag another process is forbidden goes to the one that
 * may run it.
 *
 * A claim reads its flags and then claims, in two statements. A forbid that commits between
 * the two is not heard by that claim, and a job added right after the forbid can still be
 * claimed by it: the process it was kept from ran it (one stalled-worker run in 10 or 40).
 * So `forbid()` waits until the process has read the new flag. Its claims go one at a time,
 * each reading the flags first, so by then every claim made with the old flags has ended.
 * The process must be claiming for that: running, with a free slot or prefetch room (its
 * poll tries every 200 ms); a paused or full one times the wait out.
 */
import type { WorkerProcess } from './worker-processes';
import { waitFor, type Queryable } from './wait';

/** The table, for the test's `before`. `seen`: the process has read the row (the FLAGS_TABLE read sets it). */
export const CREATE_FORBIDDEN_FLAGS = 'create table forbidden_flags (pid int not null, flag text not null, seen boolean not null default false)';

/**
 * What a FLAGS_TABLE process runs at each claim: its flags ($1 its pid, $2 '{}'), marking them
 * read. The CTE's update and the select see the same snapshot: the flags returned are the
 * ones marked.
 */
export const READ_FORBIDDEN_FLAGS = `
  with seen as (update forbidden_flags set seen = true where pid = $1 and not seen)
  select coalesce(array_agg(flag), $2) as flags from forbidden_flags where pid = $1`;

/** Forbids `worker` to claim jobs with `flag`; resolves once no claim of it can take one any more. */
export async function forbid(sql: Queryable, worker: WorkerProcess, flag: string): Promise<void> {
  await sql.query('insert into forbidden_flags (pid, flag) values ($1, $2)', [worker.pid, flag]);
  await waitFor(`worker process #${worker.index} (pid ${worker.pid}) to read that it may not claim jobs flagged ${flag}`, async () => {
    const { rows } = await sql.query('select bool_and(seen) as seen from forbidden_flags where pid = $1 and flag = $2', [worker.pid, flag]);
    return rows[0]?.seen === true;
  });
}

/** Lets `worker` claim jobs with `flag` again (from its next claim on: nothing waits for that). */
export async function allow(sql: Queryable, worker: WorkerProcess, flag: string): Promise<void> {
  await sql.query('delete from forbidden_flags where pid = $1 and flag = $2', [worker.pid, flag]);
}
