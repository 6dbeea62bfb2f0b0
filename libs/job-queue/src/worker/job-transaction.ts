import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import type { JobContext } from '../core/job-context';
import { JobQueueError } from '../core/errors';
import type { Job, JobSpec } from '../core/job';
import type { RegisteredTask } from '../discovery/task-registry';
import type { JobOutcome } from '../core/job-outcome';
import type { RunJobContext } from './attempt-context';
import { runJob } from './run-job';

/**
 * Runs one attempt of `task`: its handler as it is, or, for a `transaction: true` task, inside
 * a transaction whose manager it gets (and `ctx.addJob` joins), completed by `complete`.
 * The worker and runTask() of the testing helpers both start attempts here.
 */
export function runAttempt(
  task: RegisteredTask,
  job: Job,
  context: RunJobContext,
  dataSource: DataSource,
  complete: (manager: EntityManager, result: unknown) => Promise<void>,
): Promise<JobOutcome> {
  if (!task.options.transaction) return runJob(task, job, context);
  return runInJobTransaction(
    dataSource,
    // Each field named: the worker's context is a class, whose signal getter a spread would not copy.
    (manager) =>
      runJob(task, job, {
        signal: context.signal,
        addJob: addJobIn(manager, context.addJob),
        progress: context.progress,
        dependencyResults: context.dependencyResults,
        continueWith: context.continueWith,
        middleware: context.middleware,
        manager,
        steps: context.steps,
      }),
    complete,
  );
}

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
async function runInJobTransaction(
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
    if (!outcome.ok) return outcome;
    checkStillOpen(runner);
    await complete(runner.manager, outcome.result);
    await runner.commitTransaction();
    return { ok: true, result: outcome.result, completedInTransaction: true };
  } catch (error) {
    return { ok: false, error };
  } finally {
    await rollBackAll(runner);
    await runner.release().catch(() => undefined);
  }
}

/**
 * The handler must leave the attempt's transaction as it got it: committed or rolled back by
 * itself, the completion would run outside it; a transaction it began on the same query
 * runner and left open would make the commit only release a savepoint.
 */
function checkStillOpen(runner: QueryRunner): void {
  const depth = (runner as unknown as { transactionDepth?: number }).transactionDepth;
  if (!runner.isTransactionActive || (depth !== undefined && depth !== 1)) {
    throw new JobQueueError(
      'JQ_TRANSACTION_MISUSED',
      runner.isTransactionActive
        ? 'the handler left a transaction it began on ctx.manager open: finish it (or use ctx.manager.transaction()), the attempt is rolled back'
        : 'the handler committed or rolled back the transaction of ctx.manager itself: leave that to the worker, the attempt counts as failed',
    );
  }
}

/**
 * Whatever is still open, nested transactions included, is rolled back before the connection
 * goes back to the pool; if that fails (the connection is gone) the pool drops the connection.
 */
async function rollBackAll(runner: QueryRunner): Promise<void> {
  while (runner.isTransactionActive) {
    try {
      await runner.rollbackTransaction();
    } catch {
      return;
    }
  }
}

/** ctx.addJob of a transactional attempt: joins its transaction unless the spec names a manager. */
function addJobIn(manager: EntityManager, addJob: JobContext['addJob']): JobContext['addJob'] {
  const add = addJob as (identifier: string, payload?: unknown, spec?: JobSpec) => Promise<Job>;
  return ((identifier: string, payload?: unknown, spec?: JobSpec) => add(identifier, payload, { manager, ...spec })) as JobContext['addJob'];
}
