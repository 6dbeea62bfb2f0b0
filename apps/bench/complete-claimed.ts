import type { Client } from 'pg';
import { claimOf } from '../../libs/job-queue/src/core/claim-token';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { toClaimedJob, type ClaimedRow } from '../../libs/job-queue/src/worker/claimed-job';
import { releaseParameters } from '../../libs/job-queue/src/worker/release-parameters';
import { SCHEMA } from './jobs-table';

const sql = createQueries(SCHEMA);

/**
 * `rows` (claimed for `workerId`) completed with the release batcher's statement, keep-completed
 * on, as a worker with the default retention passes; returns how many. As the batcher does,
 * rows a concurrent claim has locked for a moment come back as busy, and are released again.
 */
export async function completeClaimed(client: Client, workerId: string, rows: ClaimedRow[]): Promise<number> {
  const claims = new Map(rows.map((row) => [row.id, claimOf(toClaimedJob(row, workerId))]));
  let ids = rows.map((row) => row.id);
  let done = 0;
  while (ids.length > 0) {
    const values = releaseParameters(workerId, { completed: ids.map((id) => ({ id, claim: claims.get(id)!, result: null })), failed: [], started: [], progress: new Map(), claims: new Map() }, true);
    const released = await client.query<{ released: number; busy: string[] }>({ name: 'bench_release', text: sql.releaseJobs, values }); // prepared, as the worker runs it
    const { released: count, busy } = released.rows[0];
    if (count + busy.length !== ids.length) throw new Error(`plain SQL: released ${count} and ${busy.length} busy of ${ids.length} claimed jobs`);
    done += count;
    ids = busy;
  }
  return done;
}
