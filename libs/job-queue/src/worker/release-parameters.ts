import type { JobQueueDatabase } from '../db/job-queue-database';
import type { InlineValue } from '../db/inline-parameters';
import { notifyFinished } from '../sql/notify-after';
import type { FlushReleases, FlushWritten, ReleaseBatch } from './release-batcher';

/**
 * How worker `workerId` writes a flush of its ReleaseBatcher: sql releaseJobs, prepared and
 * with its generic plan (see its comment), publishing the queue events that `audience()` (the listeners' filter, or null) wants.
 */
export function writeReleases(db: JobQueueDatabase, workerId: string, keepCompleted: boolean, audience: () => string | null): FlushReleases {
  return async (batch) => {
    // its generic plan: a flush of a few jobs was planned at every call, planning costing more than the run
    // and its NOTIFY to waiters after the commit (sql/notify-after.ts says why)
    const told = notifyFinished(db.sql.finishedChannel, [...batch.completed.map((job) => job.id), ...batch.failed.map((job) => job.id)]);
    const [written] = await db.runGenericPlan<FlushWritten>('releaseJobs', RELEASE_TYPES, releaseParameters(workerId, batch, keepCompleted, audience()), { quiet: 'releaseJobsQuiet', statements: told });
    return written;
  };
}

/** The SQL types of releaseJobs' parameters, in order (releaseParameters). */
export const RELEASE_TYPES = ['text', 'bigint[]', 'jsonb', 'bigint[]', 'jsonb', 'bigint[]', 'bigint[]', 'jsonb', 'boolean', 'jsonb', 'jsonb'];

/**
 * The parameters of sql releaseJobs for one batch of worker `workerId`. Per-job values go as
 * jsonb objects keyed by job id, which the statement reads by id: a join to parallel arrays
 * is what made its generic plan quadratic (see releaseJobs).
 */
export function releaseParameters(
  workerId: string,
  { completed, failed, started, progress, claims, again }: ReleaseBatch,
  keepCompleted: boolean,
  audience: string | null = null,
): InlineValue[] {
  const progressOf = new Map(progress);
  for (const job of [...completed, ...failed]) if (job.progress !== undefined) progressOf.set(job.id, job.progress);
  const results: Array<[string, string]> = [];
  for (const { id, result } of completed) if (result !== null) results.push([id, result]);
  const failures: Array<[string, string]> = failed.map((f) => {
    const json = JSON.stringify({ message: f.error, code: f.code, delay_ms: f.delayMs });
    // a new payload is JSON text already: spliced in as it is
    return [f.id, f.payload === undefined ? json : `${json.slice(0, -1)},"payload":${f.payload}}`];
  });
  return [
    workerId,
    completed.map((c) => c.id),
    objectById(results),
    failed.map((f) => f.id),
    objectById(failures),
    started,
    [...progressOf.keys()],
    objectById(progressOf),
    keepCompleted,
    audience,
    // $11: each job's claim (ClaimToken) when written again, so that a flush whose reply was lost lands on no later claim
    again ? objectById(claimTokens(completed, failed, claims)) : null,
  ];
}

function* claimTokens(completed: ReleaseBatch['completed'], failed: ReleaseBatch['failed'], claims: ReleaseBatch['claims']): Iterable<[string, string]> {
  // tokens are digits: quoted as they are
  for (const [id, claim] of claims) yield [id, `"${claim}"`];
  for (const { id, claim } of [...completed, ...failed]) yield [id, `"${claim}"`];
}

/** A JSON object of JSON texts by job id: ids are digits, the texts already valid JSON (json.ts), so they are joined as they are. */
function objectById(entries: Iterable<[string, string]>): string {
  const members: string[] = [];
  for (const [id, json] of entries) members.push(`"${id}":${json}`);
  return `{${members.join(',')}}`;
}
