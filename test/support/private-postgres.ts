/**
 * A PostgreSQL server of a test's own, for tests that stop and restart it: an embedded one
 * on its own data folder and port, so no other test's server is ever touched. Stopped and
 * started again, it keeps its data and its address, as a restarted production server does.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startEmbeddedPostgres, type EmbeddedPostgres } from '../../apps/embedded-postgres';

export class PrivatePostgres {
  private server?: EmbeddedPostgres;

  private constructor(
    private readonly dataDir: string,
    private readonly port: number,
  ) {}

  /** Starts a new server; `destroy()` it in the test's `after`. */
  static async start(): Promise<PrivatePostgres> {
    const postgres = new PrivatePostgres(mkdtempSync(join(tmpdir(), 'jq-private-pg-')), await freePort());
    await postgres.start();
    return postgres;
  }

  /** The `postgres` database of this server. */
  get url(): string {
    return `postgres://postgres:postgres@127.0.0.1:${this.port}/postgres`;
  }

  /** Starts the server again on the same data folder and port. */
  async start(): Promise<void> {
    if (this.server) throw new Error('the private PostgreSQL is already running');
    this.server = await startEmbeddedPostgres({ dataDir: this.dataDir, port: this.port, persistent: true });
  }

  /** Stops the server (a fast shutdown: every connection is closed); its data stays. */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    await server?.stop();
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  /** Stops the server and removes its data. */
  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}
