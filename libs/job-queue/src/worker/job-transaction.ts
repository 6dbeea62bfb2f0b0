import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import type { JobContext } from '../decorators/job-context';
import type { Job, JobSpec } from '../service/job';
import type { JobOutcome } from './run-job';

/**
 * Runs one attempt of a `transaction: true` task (River's JobCompleteTx): a transaction is
 * opened for it, the handler writes through its manager, and on success `complete` writes
 * the job's completion in that same transaction before it commits. So the handler's writes
 * and the completion are one commit: a throw, a failing `complete` (the job was rescued,
 * cancelled or timed out meanwhile), a crash or a lost connection leaves neither, and the
 * job is retried like any failed attempt.
 *
 * A commit whose reply is lost is reported as a failure: if it did commit, the job row is
 * gone, and the release of that failure finds nothing to write.
 */
export async function runInJobTransaction(
  dataSource: DataSource,
  run: (manager: EntityManager) => Promise<JobOutcome>,
  complete: (manager: EntityManager, result: unknown) => Promise<void>,
): Promise<JobOutcome> {
  let runner: QueryRunner | undefined;
  try {
    runner = dataSource.createQueryRunner();
    await runner.connect();
    await runner.startTransaction();
  } catch (error) {
    await runner?.release().catch(() => undefined);
    return { ok: false, error };
  }
  try {
    const outcome = await run(runner.manager);
    if (!outcome.ok) {
      await rollBack(runner);
      return outcome;
    }
    await complete(runner.manager, outcome.result);
    await runner.commitTransaction();
    return { ok: true, result: outcome.result, completedInTransaction: true };
  } catch (error) {
    await rollBack(runner);
    return { ok: false, error };
  } finally {
    await runner.release().catch(() => undefined);
  }
}

/** A rollback that fails (the connection is gone) leaves nothing committed either. */
async function rollBack(runner: QueryRunner): Promise<void> {
  if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
}

/** ctx.addJob of a transactional attempt: joins its transaction unless the spec names a manager. */
export function addJobIn(manager: EntityManager, addJob: JobContext['addJob']): JobContext['addJob'] {
  const add = addJob as (identifier: string, payload?: unknown, spec?: JobSpec) => Promise<Job>;
  return ((identifier: string, payload?: unknown, spec?: JobSpec) => add(identifier, payload, { manager, ...spec })) as JobContext['addJob'];
}
