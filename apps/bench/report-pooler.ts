import type { BenchConfig } from './config';
import { cell, perRound, printGrid, values } from './report-format';
import type { PoolerLine, PoolerResult } from './pooler';

const LABELS: Record<PoolerLine, string> = {
  direct: 'straight to PostgreSQL (no pooler, default options)',
  directPooled: 'straight to PostgreSQL with transactionPooling (the option alone)',
  listenUrl: 'through PgBouncer: transactionPooling, listenUrl (LISTEN direct)',
  polling: 'through PgBouncer: transactionPooling, no listenUrl (polling)',
};

/**
 * The pooler lines (pooler.ts): our drain through PgBouncer in transaction mode, with and
 * without listenUrl, against the same drain straight to PostgreSQL; each ratio per round, of
 * that round's drains, then the median (min–max) over the rounds.
 */
export function printPooler(config: BenchConfig, rounds: PoolerResult[]): void {
  printGrid(
    [`nestjs-job-queue drain, ${config.jobs} jobs, concurrency ${config.concurrency}`, 'jobs/s', 'against straight to PostgreSQL'],
    (Object.keys(LABELS) as PoolerLine[]).map((line) => [
      LABELS[line],
      cell(values(rounds, (r) => r[line]), 'throughput'),
      cell(perRound(rounds, (r) => r[line], (r) => r.direct), 'percent'),
    ]),
  );
  console.log('');
  console.log(
    `pooler lines: Debian's PgBouncer in transaction mode (default_pool_size ${config.poolSize}) on the same machine, four apps open at once on one database, ` +
      'each drain after VACUUM of jobs and a CHECKPOINT, JOBS jobs added by addMany(), timed from the worker\'s start to the last handler start. ' +
      'Through the pooler the statements run unprepared (parsed and planned each time) and each claim is a transaction of its own (begin with SET LOCAL, the claim, commit); ' +
      'PgBouncer shares the machine\'s CPUs with Node and PostgreSQL.',
  );
}
