import { EntityManager, type DataSource } from 'typeorm';
import { JobQueueError } from '../core/errors';

/**
 * A `manager` given to add(), addMany() or ctx.addJob() must be inside a transaction of the
 * queue's own DataSource. One outside a transaction would autocommit the job, which would
 * then outlive the caller's rollback; one of another DataSource would write the job through
 * a connection the queue does not use, possibly to another database.
 */
export function checkManager(manager: unknown, dataSource: DataSource): void {
  if (manager === undefined || manager === null) return;
  if (!(manager instanceof EntityManager)) throw new JobQueueError('JQ_INVALID_SPEC', 'manager must be a TypeORM EntityManager');
  if (manager.connection !== dataSource) {
    throw new JobQueueError(
      'JQ_WRONG_DATA_SOURCE',
      'manager belongs to another DataSource than the job queue\'s (it may be another database): pass a manager of the queue\'s DataSource',
    );
  }
  if (!manager.queryRunner?.isTransactionActive) {
    throw new JobQueueError(
      'JQ_NO_TRANSACTION',
      'manager is not in a transaction (use the one dataSource.transaction() passes to its callback): the job would be committed on its own',
    );
  }
}
