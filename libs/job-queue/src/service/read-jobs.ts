import type { EntityManager } from 'typeorm';
import { latestJobs, type Job, type JobRow } from '../core/job';
import type { JobQueueDatabase } from '../db/job-queue-database';

/** The jobs with these ids as they are now, by id, in one statement (through `manager` when given); ids of no job are missing. */
export async function readJobs(db: JobQueueDatabase, ids: readonly string[], manager?: EntityManager): Promise<Map<string, Job>> {
  return ids.length === 0 ? new Map() : latestJobs(await db.run<JobRow>('getJobs', [ids], manager));
}
