import type { Pool, PoolClient } from 'pg';
import { JobQueueError } from '../core/errors';

const DEPLOYMENT_GUIDE = 'see docs/guides/deployment.md in the repository';

/**
 * Whether `pool`'s connections go through a pooler in transaction (or statement) mode, which
 * hands each transaction whichever server connection is free. Two connections held at once
 * take turns asking for their backend's pid: straight to PostgreSQL each keeps its own
 * backend, all different; through such a pooler a backend is shared (one client gets the
 * backend the other just gave back, as PgBouncer's LIFO reuse does) or changes under one
 * client. A pooler in session mode pins a backend to each client and is not reported (nothing
 * breaks there). Best effort: a pooler that happened to keep each client on a backend of its
 * own through the four statements goes unnoticed here; its named prepared statements then fail
 * (preparedStatementClash below). About four round trips, once at startup.
 */
export async function goesThroughTransactionPooler(pool: Pool): Promise<boolean> {
  const clients: PoolClient[] = [];
  try {
    // A pool of one cannot hold two: one connection, asked twice, must keep its backend.
    const wanted = (pool.options.max ?? 10) >= 2 ? 2 : 1;
    const connected = await Promise.allSettled(Array.from({ length: wanted }, () => pool.connect()));
    for (const result of connected) if (result.status === 'fulfilled') clients.push(result.value);
    const failed = connected.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    const pids: number[] = [];
    for (let round = 0; round < 2; round++) {
      for (const client of clients) pids.push((await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0].pid);
    }
    // [a, b, a, b] or [a, a]: each client keeps its pid, and no two clients share one
    const perClient = clients.map((_, i) => new Set(pids.filter((_, k) => k % clients.length === i)));
    return perClient.some((set) => set.size > 1) || new Set(pids).size !== clients.length;
  } finally {
    for (const client of clients) client.release();
  }
}

/** What the module's refusal tells to do: its options. */
const MODULE_FIX =
  'The job queue would lose its LISTEN, its claim settings, its migration lock and its prepared statements there. ' +
  'Set transactionPooling: true in JobQueueModule\'s options (and listenUrl to a direct connection string, to be woken by NOTIFY rather than by polling), ' +
  'or connect the DataSource to PostgreSQL directly';

/**
 * Refuses connections that go through a transaction-mode pooler unless the options say so.
 * `fix`: what the refusal tells to do (default: the module's options; the CLI names its flag).
 */
export function transactionPoolerFound(fix: string = MODULE_FIX, what = 'the DataSource\'s connections'): JobQueueError {
  return new JobQueueError(
    'JQ_TRANSACTION_POOLER',
    `${what} go through a pooler in transaction mode (PgBouncer pool_mode=transaction, RDS Proxy, Supavisor): ` +
      `different transactions of one connection ran on different PostgreSQL backends. ${fix}; ${DEPLOYMENT_GUIDE}`,
  );
}

/** Refuses a listenUrl that leads to a transaction-mode pooler too. */
export function listenUrlThroughPooler(): JobQueueError {
  return new JobQueueError(
    'JQ_TRANSACTION_POOLER',
    'listenUrl goes through a pooler in transaction mode too: different transactions of one connection ran on different PostgreSQL backends, ' +
      `so LISTEN would hear nothing. listenUrl must reach PostgreSQL directly (the database host, not the pooler's); ${DEPLOYMENT_GUIDE}`,
  );
}

/**
 * A named prepared statement of the library that the server does not know (26000), or knows
 * already (42P05): the connection's statements ran on another backend than the one that
 * prepared them, which only a pooler does. The error to throw instead, or undefined.
 */
export function preparedStatementClash(error: unknown, transactionPooling: boolean): JobQueueError | undefined {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  if ((code !== '26000' && code !== '42P05') || !/prepared statement "jq_/.test(message ?? '')) return undefined;
  const advice = transactionPooling
    ? 'preparedStatements: true needs a pooler that keeps prepared statements per client (PgBouncer 1.21+ with max_prepared_statements above 0): ' +
      'set preparedStatements: false, or configure the pooler'
    : 'set transactionPooling: true in JobQueueModule\'s options, or connect the DataSource to PostgreSQL directly';
  return new JobQueueError('JQ_TRANSACTION_POOLER', `a prepared statement of the job queue ran on another backend than the one that prepared it (${message}): its connection goes through a pooler in transaction mode; ${advice}; ${DEPLOYMENT_GUIDE}`);
}
