import type { EntityManager } from 'typeorm';
import type { Job } from '../core/job';
import type { ValidJob } from '../core/validate-job-spec';
import type { JobQueueDatabase } from '../db/job-queue-database';
import { readJobs } from './read-jobs';

/**
 * An add with `dedupeFor` (throttling: pg-boss's singletonSeconds, BullMQ's deduplication ttl):
 * when a job with the key was added less than `dedupeFor` ago, unfinished or finished, that job
 * is returned and nothing is added; otherwise `addKeyed` adds as the key's mode says. In the
 * caller's transaction (`manager`), or one of its own: the key's lock (sql lockJobKey) is held
 * to its end, so that two such adds of one key never both find nothing and both add.
 */
export async function addDeduped(
  db: JobQueueDatabase,
  job: ValidJob & { jobKey: string; dedupeForMs: number },
  manager: EntityManager | undefined,
  addKeyed: (manager: EntityManager) => Promise<Job[]>,
): Promise<Job[]> {
  const add = async (transaction: EntityManager): Promise<Job[]> => {
    await db.run('lockJobKey', [job.jobKey], transaction);
    const [recent] = await db.run<{ id: string }>('recentJobByKey', [job.jobKey, job.dedupeForMs], transaction);
    const found = recent && (await readJobs(db, [recent.id], transaction)).get(recent.id);
    return found ? [found] : addKeyed(transaction);
  };
  return manager ? add(manager) : db.dataSource.transaction(add);
}
