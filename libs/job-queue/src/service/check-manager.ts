import { EntityManager, type DataSource } from 'typeorm';
import { JobQueueError } from '../errors';

/**
 * A `manager` given to add(), addMany() or ctx.addJob() must be inside a transaction of the
 * queue's own DataSource. Any other manager would write the job outside the caller's
 * transaction: it would be autocommitted, and outlive the caller's rollback.
 */
export function checkManager(manager: unknown, dataSource: DataSource): void {
  if (manager === undefined || manager === null) return;
  if (!(manager instanceof EntityManager)) throw new JobQueueError('JQ_INVALID_SPEC', 'manager must be a TypeORM EntityManager');
  if (manager.connection !== dataSource) {
    throw new JobQueueError('JQ_WRONG_DATA_SOURCE', 'manager belongs to another DataSource than the job queue\'s: the job would not join its transaction');
  }
  if (!manager.queryRunner?.isTransactionActive) {
    throw new JobQueueError(
      'JQ_NO_TRANSACTION',
      'manager is not in a transaction (use the one dataSource.transaction() passes to its callback): the job would be committed on its own',
    );
  }
}
