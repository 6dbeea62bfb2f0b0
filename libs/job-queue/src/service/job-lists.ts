import { JobQueueError } from '../core/errors';
import { JOB_STATES, type JobState } from '../core/job-state';
import { countsReport, type JobCountRow, type JobCountsReport } from '../core/job-counts';
import { toJob, type Job, type JobRow } from '../core/job';
import { LIMITS, optionalString, validateTaskIdentifier } from '../core/validate-job-spec';
import type { JobQueueDatabase } from '../db/job-queue-database';
import { listStatements } from '../sql/read';

/** Filters and page of listJobs(). */
export interface ListJobsOptions {
  /** Only jobs in this state. Without it: unfinished jobs first (newest first), then finished ones (last finished first). */
  state?: JobState;
  task?: string;
  queue?: string;
  /** Jobs per page, 1 to 1000. Default 50. */
  limit?: number;
  /** The `nextCursor` of the previous page. */
  cursor?: string | null;
}

export interface JobPage {
  jobs: Job[];
  /** Pass it back as `cursor` for the next page; null on the last page. */
  nextCursor: string | null;
}

export type { JobCounts, JobCountsReport } from '../core/job-counts';

export interface RescheduleOptions {
  runAt?: Date;
  priority?: number;
  attempts?: number;
  maxAttempts?: number;
}

/** JobQueueService.listJobs(). */
export async function listJobs(db: JobQueueDatabase, options: ListJobsOptions = {}): Promise<JobPage> {
  const { state, task, queue, limit = 50, cursor } = options ?? {};
  if (state !== undefined && !JOB_STATES.includes(state)) {
    throw new JobQueueError('JQ_INVALID_STATE', `state must be one of ${JOB_STATES.join(', ')}, got ${JSON.stringify(state)}`);
  }
  if (task !== undefined) validateTaskIdentifier(task);
  const queueName = optionalString(queue, 'JQ_INVALID_QUEUE_NAME', 'queue', LIMITS.queueNameLength);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new JobQueueError('JQ_INVALID_SPEC', `limit must be an integer from 1 to 1000, got ${String(limit)}`);
  const from = decodeCursor(cursor);
  const statements = listStatements(state ?? null, task !== undefined);
  const rows: JobRow[] = [];
  if (statements.active && from?.phase !== 'finished') {
    rows.push(...(await db.runPlannedEachTime<JobRow>(statements.active, [task ?? null, queueName, from?.id ?? null, limit + 1])));
  }
  if (statements.finished && rows.length <= limit) {
    const after = from?.phase === 'finished' ? from : undefined;
    rows.push(...(await db.runPlannedEachTime<JobRow>(statements.finished, [task ?? null, queueName, after?.at ?? null, after?.id ?? null, limit + 1 - rows.length])));
  }
  const page = rows.slice(0, limit);
  const last = page[page.length - 1] as (JobRow & { finished_at_key?: string | null }) | undefined;
  const nextCursor =
    rows.length > limit && last
      ? encodeCursor(last.finished_at_key ? { phase: 'finished', at: last.finished_at_key, id: String(last.id) } : { phase: 'active', id: String(last.id) })
      : null;
  return { jobs: page.map((row) => toJob(row)), nextCursor };
}

/** JobQueueService.countJobs(). */
export async function countJobs(db: JobQueueDatabase): Promise<JobCountsReport> {
  return countsReport(await db.run<JobCountRow>('countJobs', []));
}

/** Where a page ended: in the unfinished jobs (by id), or in the finished ones (by finished_at, id). */
type Cursor = { phase: 'active'; id: string } | { phase: 'finished'; at: string; id: string };

function encodeCursor(cursor: Cursor): string {
  return Buffer.from(JSON.stringify(cursor)).toString('base64url');
}

function decodeCursor(text: string | null | undefined): Cursor | undefined {
  if (text === undefined || text === null) return undefined;
  const bad = () => new JobQueueError('JQ_INVALID_CURSOR', 'cursor must be the nextCursor of an earlier listJobs() page');
  if (typeof text !== 'string') throw bad();
  let cursor: Partial<Cursor & { at: unknown }>;
  try {
    cursor = JSON.parse(Buffer.from(text, 'base64url').toString());
  } catch {
    throw bad();
  }
  const id = typeof cursor?.id === 'string' && /^[1-9][0-9]{0,18}$/.test(cursor.id) ? cursor.id : undefined;
  if (id && cursor.phase === 'active') return { phase: 'active', id };
  if (id && cursor.phase === 'finished' && typeof cursor.at === 'string' && !Number.isNaN(Date.parse(cursor.at))) return { phase: 'finished', at: cursor.at, id };
  throw bad();
}
