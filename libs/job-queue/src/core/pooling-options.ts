import { JobQueueError } from './errors';

/** The module options about a connection pooler between the app and PostgreSQL (see docs/guides/deployment.md). */
export interface PoolingOptions {
  /**
   * The DataSource's connections go through a pooler in transaction mode (PgBouncer's
   * `pool_mode = transaction`, RDS Proxy, Supavisor's transaction port), where a connection
   * keeps nothing between transactions: no LISTEN, no session SET, no session advisory lock,
   * and (PgBouncer before 1.21) no named prepared statement. Then the library prepares no
   * statement (unless `preparedStatements`), gives claims their settings with SET LOCAL,
   * migrates under transaction-scoped locks (or on `listenUrl`), and LISTENs only on
   * `listenUrl`: without it, workers and waitForJob poll every `pollInterval`. Default false:
   * a pooler in transaction mode found at startup is then refused (JQ_TRANSACTION_POOLER).
   */
  transactionPooling?: boolean;
  /**
   * With `transactionPooling`: a connection string that reaches PostgreSQL directly (not
   * through the pooler), e.g. `postgres://user:password@db-host:5432/app`. Each process opens
   * at most three connections there, for LISTEN (the worker, waitForJob, cluster-wide events)
   * and the worker's heartbeats; the migrations at startup run there too (building indexes
   * concurrently). What the URL leaves out (password, ssl) is taken from the DataSource's options.
   */
  listenUrl?: string;
  /**
   * Run the hot path's statements as named prepared statements. Default: true, and false
   * with `transactionPooling` (each statement is then parsed and planned at every run). Set
   * it with `transactionPooling` when the pooler supports protocol-level prepared statements
   * (PgBouncer 1.21+ with `max_prepared_statements` above 0).
   */
  preparedStatements?: boolean;
}

export interface ResolvedPoolingOptions {
  transactionPooling: boolean;
  listenUrl?: string;
  preparedStatements: boolean;
}

/** Checks the pooling options (JQ_INVALID_OPTIONS) and fills in their defaults. */
export function resolvePoolingOptions(options: PoolingOptions): ResolvedPoolingOptions {
  const { transactionPooling = false, listenUrl } = options;
  for (const name of ['transactionPooling', 'preparedStatements'] as const) {
    if (options[name] !== undefined && typeof options[name] !== 'boolean') {
      throw new JobQueueError('JQ_INVALID_OPTIONS', `${name} must be a boolean, got ${typeof options[name]}`);
    }
  }
  if (listenUrl !== undefined) {
    if (!transactionPooling) {
      throw new JobQueueError(
        'JQ_INVALID_OPTIONS',
        'listenUrl is for transactionPooling: true (a direct connection beside a transaction-mode pooler); without a pooler, LISTEN runs on the DataSource\'s own connections: remove listenUrl, or set transactionPooling',
      );
    }
    checkConnectionString(listenUrl);
  }
  return { transactionPooling, listenUrl, preparedStatements: options.preparedStatements ?? !transactionPooling };
}

/** A postgres:// or postgresql:// URL with a host. The message never repeats the URL: it may hold a password. */
function checkConnectionString(value: unknown): void {
  const expected = 'a connection string such as postgres://user:password@db-host:5432/database, reaching PostgreSQL directly';
  if (typeof value !== 'string' || value.trim() === '') {
    throw new JobQueueError('JQ_INVALID_OPTIONS', `listenUrl must be ${expected}, got ${typeof value === 'string' ? 'an empty string' : typeof value}`);
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new JobQueueError('JQ_INVALID_OPTIONS', `listenUrl must be ${expected}: it is not a URL`);
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new JobQueueError('JQ_INVALID_OPTIONS', `listenUrl must be ${expected}: its scheme is ${url.protocol.slice(0, 20)}`);
  }
  if (!url.hostname) throw new JobQueueError('JQ_INVALID_OPTIONS', `listenUrl must be ${expected}: it names no host`);
}
