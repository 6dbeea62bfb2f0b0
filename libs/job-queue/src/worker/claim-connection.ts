import type { Pool, PoolClient } from 'pg';

/**
 * The session settings of the connection claims run on (the bench's SQL-limit line uses them
 * too, as part of the claim):
 * - `synchronous_commit = off`: a claim does not wait for the disk. One lost in a server
 *   crash only offers its jobs again, and the durable release that follows it flushes the
 *   claim's WAL as well. Releases, adds and the app's own transactions are not affected.
 * - no bitmap or sequential scans: the claim walks jobs_fetch_idx in order and stops at its
 *   limit. On a table without statistics (just filled), the planner otherwise guesses that
 *   few rows match and reads and sorts every due job at each claim: slower the longer the
 *   backlog.
 */
export const CLAIM_SESSION_SETTINGS = 'set synchronous_commit = off; set enable_bitmapscan = off; set enable_seqscan = off';
const RESET_SETTINGS = 'reset synchronous_commit; reset enable_bitmapscan; reset enable_seqscan; reset application_name';

/** The application_name of a worker's claim connection, as pg_stat_activity shows it: with the process id. */
export const CLAIMS_APPLICATION_NAME = `nestjs-job-queue claims ${process.pid}`;

/**
 * One pool connection that the worker's claims run on, taken on first use and kept: claims
 * never wait behind handlers for a connection, and keep their prepared statement. A failed
 * claim discards it (it may be broken); the next claim takes another.
 */
export class ClaimConnection {
  private client?: Promise<PoolClient>;

  /** `pool`: the DataSource's, once it is initialised. */
  constructor(private readonly pool: () => Pool) {}

  get(): Promise<PoolClient> {
    this.client ??= this.connect().catch((error: unknown) => {
      this.client = undefined;
      throw error;
    });
    return this.client;
  }

  private async connect(): Promise<PoolClient> {
    const client = await this.pool().connect();
    // A connection that dies between claims is dropped: the next claim takes another.
    client.on('error', (error) => void this.drop(client, error));
    try {
      await client.query(`${CLAIM_SESSION_SETTINGS}; set application_name = '${CLAIMS_APPLICATION_NAME}'`);
    } catch (error) {
      this.destroy(client, error);
      throw error;
    }
    return client;
  }

  /** After a failed claim: the connection may be broken, so it is destroyed rather than reused. */
  async discard(error: unknown): Promise<void> {
    const client = await this.client?.catch(() => undefined);
    if (client) await this.drop(client, error);
  }

  private async drop(client: PoolClient, error: unknown): Promise<void> {
    if ((await this.client?.catch(() => undefined)) !== client) return; // an older one, dropped already
    this.client = undefined;
    this.destroy(client, error);
  }

  private destroy(client: PoolClient, error: unknown): void {
    client.removeAllListeners('error');
    client.on('error', () => {}); // a dead connection may still emit
    client.release(error instanceof Error ? error : true);
  }

  /** Gives the connection back to the pool with its settings reset (the worker stops). */
  async release(): Promise<void> {
    const client = await this.client?.catch(() => undefined);
    this.client = undefined;
    if (!client) return;
    client.removeAllListeners('error');
    client.on('error', () => {});
    try {
      await client.query(RESET_SETTINGS);
      client.removeAllListeners('error');
      client.release();
    } catch (error) {
      client.release(error instanceof Error ? error : true);
    }
  }
}
