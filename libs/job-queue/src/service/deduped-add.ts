import type { EntityManager } from 'typeorm';
import { JobQueueError } from '../core/errors';
import type { Job } from '../core/job';
import type { ValidJob } from '../core/validate-job-spec';
import type { JobQueueDatabase } from '../db/job-queue-database';
import { readJobs } from './read-jobs';

/** A job with a `dedupeFor` (and so a key). */
export type ThrottledJob = ValidJob & { jobKey: string; dedupeForMs: number };

/**
 * The turn of `keys` (sql lockJobKeys), held to the end of the transaction: adds with dedupeFor
 * of the same keys wait for it. Refuses a transaction stricter than READ COMMITTED, where the
 * look that follows would not see what the add it waited for committed (JQ_ISOLATION_LEVEL).
 */
export async function lockJobKeys(db: JobQueueDatabase, keys: readonly string[], transaction: EntityManager): Promise<void> {
  const [{ isolation }] = await db.run<{ isolation: string }>('lockJobKeys', [keys], transaction);
  if (isolation !== 'read committed') {
    throw new JobQueueError('JQ_ISOLATION_LEVEL', `dedupeFor needs a READ COMMITTED transaction, the manager's is ${isolation.toUpperCase()}: nothing was added`);
  }
}

/**
 * An add with `dedupeFor` (throttling: pg-boss's singletonSeconds, BullMQ's deduplication ttl):
 * when a job with the key was added less than `dedupeFor` ago, unfinished or finished, that job
 * is returned and nothing is added; otherwise `addKeyed` adds as the key's mode says. In the
 * caller's transaction (`manager`), or a READ COMMITTED one of its own: the key's turn
 * (lockJobKeys) is held to its end, so that two such adds of one key never both find nothing
 * and both add.
 */
export async function addDeduped(
  db: JobQueueDatabase,
  job: ThrottledJob,
  manager: EntityManager | undefined,
  addKeyed: (manager: EntityManager) => Promise<Job[]>,
): Promise<Job[]> {
  const add = async (transaction: EntityManager): Promise<Job[]> => {
    await lockJobKeys(db, [job.jobKey], transaction);
    const [recent] = await db.run<{ id: string }>('recentJobByKey', [job.jobKey, job.dedupeForMs], transaction);
    const found = recent && (await readJobs(db, [recent.id], transaction)).get(recent.id);
    return found ? [found] : addKeyed(transaction);
  };
  return manager ? add(manager) : db.dataSource.transaction('READ COMMITTED', add);
}
