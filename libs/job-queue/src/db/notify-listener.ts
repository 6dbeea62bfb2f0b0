import type { Pool, PoolClient } from 'pg';
import { quoteIdentifier } from '../sql/identifier';
import { backoffMs } from '../core/backoff';

/** The application_name of a worker's pinned connection, as pg_stat_activity shows it: with the process id. */
export const PINNED_APPLICATION_NAME = `nestjs-job-queue worker ${process.pid}`;

/**
 * Holds one pool connection that LISTENs on `channels` and calls `onNotify` for each
 * notification. If the connection dies it reconnects with backoff, and `onNotify` is called
 * once after each (re)connect with no channel, to catch up on what it may have missed.
 *
 * A worker's listener carries its heartbeats and the maintenance leader's statements too
 * (`connection`): pinned to the worker, it is never taken by handlers that fill the shared
 * pool, so a busy pool cannot starve them. waitForJob() has a listener of its own.
 *
 * Through a transaction-mode pooler with no direct connection (transactionPooling without
 * listenUrl) the worker still pins a connection this way, with no channel and no
 * application name (`applicationName` null): nothing that would outlive a transaction.
 */
export class NotifyListener {
  private client?: PoolClient;
  private failures = 0;
  private reconnectTimer?: NodeJS.Timeout;
  private stopped = false;

  constructor(
    private readonly pool: Pool,
    private readonly channels: string[],
    /** `channel` undefined: (re)connected, anything may have been missed. */
    private readonly onNotify: (channel?: string, payload?: string) => void,
    private readonly onError: (error: unknown) => void,
    /** As pg_stat_activity shows the connection; null: not set (a pooled connection keeps no session setting). */
    private readonly applicationName: string | null = PINNED_APPLICATION_NAME,
  ) {}

  async start(): Promise<void> {
    this.stopped = false;
    await this.connect();
  }

  /** The pinned connection, while it is up. */
  get connection(): PoolClient | undefined {
    return this.client;
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    let client: PoolClient | undefined;
    try {
      client = await this.pool.connect();
      client.on('notification', (message) => this.onNotify(message.channel, message.payload));
      client.on('error', (error) => this.lost(client!, error));
      // Named, so that operators (and tests) can tell it in pg_stat_activity; reset on release.
      if (this.applicationName !== null) await client.query(`set application_name = '${this.applicationName.replace(/'/g, "''")}'`);
      for (const channel of this.channels) await client.query(`listen ${quoteIdentifier(channel)}`);
      if (this.stopped) {
        client.release(true);
        return;
      }
      this.client = client;
      this.failures = 0;
      this.onNotify();
    } catch (error) {
      if (client) this.lost(client, error);
      else this.scheduleReconnect(error);
    }
  }

  private lost(client: PoolClient, error: unknown): void {
    client.removeAllListeners('notification');
    client.removeAllListeners('error');
    client.on('error', () => {}); // a dead client may still emit
    if (this.client === client) this.client = undefined;
    try {
      client.release(error instanceof Error ? error : true);
    } catch {
      // already released
    }
    this.scheduleReconnect(error);
  }

  private scheduleReconnect(error: unknown): void {
    if (this.stopped || this.reconnectTimer) return;
    this.failures += 1;
    this.onError(error);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      void this.connect();
    }, backoffMs(this.failures));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    client.removeAllListeners('notification');
    // From here on only this method releases the client: an error now must not release it twice.
    client.removeAllListeners('error');
    const ignore = () => {};
    client.on('error', ignore);
    try {
      const reset = [this.channels.length > 0 ? 'unlisten *' : '', this.applicationName !== null ? 'reset application_name' : ''].filter(Boolean);
      if (reset.length > 0) await client.query(reset.join('; '));
      client.off('error', ignore); // back to the pool with only the pool's own listener
      client.release();
    } catch {
      client.release(true);
    }
  }
}
