import type { Pool, PoolClient } from 'pg';

/** What a borrowed connection sends after its work, without its caller waiting for it. */
export interface Afterwards {
  /** The message to send once the work succeeded. */
  send(client: PoolClient): Promise<unknown>;
  /** Told when that message failed (its connection is then destroyed); the work's caller has its result already. */
  failed(error: unknown): void;
}

/**
 * Runs `work` on a connection taken from `pool` for it alone: given back after, destroyed if
 * `work` failed (the connection may be broken, or left in a transaction). Its 'error' events
 * meanwhile are told as the query's rejection too; unheard, one would be thrown.
 *
 * With `afterwards`, the caller gets the work's result at once and the connection goes back
 * only once `afterwards` was sent and answered: no one else's query waits behind it, and its
 * failure is `afterwards.failed`'s, not the caller's (the NOTIFYs after a commit,
 * sql/notify-after.ts: the work committed, so failing the caller would invite a second add).
 */
export async function onBorrowedConnection<T>(pool: Pool, work: (client: PoolClient) => Promise<T>, afterwards?: Afterwards): Promise<T> {
  const client = await pool.connect();
  const lost = () => undefined;
  client.on('error', lost);
  const giveBack = (error?: unknown) => {
    client.off('error', lost);
    client.release(error === undefined ? undefined : error instanceof Error ? error : true);
  };
  let result: T;
  try {
    result = await work(client);
  } catch (error) {
    giveBack(error);
    throw error;
  }
  if (!afterwards) {
    giveBack();
    return result;
  }
  afterwards.send(client).then(
    () => giveBack(),
    (error: unknown) => {
      giveBack(error ?? true);
      afterwards.failed(error);
    },
  );
  return result;
}
