/**
 * The worker shares the DataSource's pg pool with the app: one connection stays pinned for
 * LISTEN, heartbeats and maintenance, and one for claims (so those are never starved),
 * releases need one, and every running handler that touches the database holds one (a
 * `transaction: true` handler for its whole run). A pool smaller than that makes releases
 * wait behind handlers.
 */
export const QUEUE_OWN_CONNECTIONS = 3;

/** A warning to log at startup when the pool cannot hold `concurrency` handlers plus the queue's own connections. */
export function poolSizeWarning(poolMax: number, concurrency: number): string | undefined {
  const needed = concurrency + QUEUE_OWN_CONNECTIONS;
  if (poolMax >= needed) return undefined;
  return (
    `the database pool has ${poolMax} connections, fewer than concurrency ${concurrency} + ${QUEUE_OWN_CONNECTIONS} ` +
    `(LISTEN and heartbeats, claims, releases) = ${needed}: handlers that use the database can starve the queue's own statements. ` +
    `Give the DataSource a pool of at least ${needed} (TypeORM's poolSize, or extra.max), plus what the rest of the app uses, or lower concurrency.`
  );
}

/** The default concurrency: 10, or fewer when the pool cannot hold 10 handlers besides the queue's own connections. */
export function concurrencyForPool(poolMax: number): number {
  return Math.max(1, Math.min(10, poolMax - QUEUE_OWN_CONNECTIONS));
}
