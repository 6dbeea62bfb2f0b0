import type { Pool, PoolClient } from 'pg';

/**
 * Runs `work` on a connection taken from `pool` for it alone: given back after, destroyed if
 * `work` failed (the connection may be broken, or left in a transaction). Its 'error' events
 * meanwhile are told as the query's rejection too; unheard, one would be thrown.
 */
export async function onBorrowedConnection<T>(pool: Pool, work: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  const lost = () => undefined;
  client.on('error', lost);
  try {
    const result = await work(client);
    client.release();
    return result;
  } catch (error) {
    client.release(error instanceof Error ? error : true);
    throw error;
  } finally {
    client.off('error', lost);
  }
}
