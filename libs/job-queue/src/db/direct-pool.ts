import { Pool, type ClientBase, type PoolConfig } from 'pg';

/**
 * With `transactionPooling` and `listenUrl`: the connections that reach PostgreSQL directly,
 * beside the pooler, for what a transaction-mode pooler cannot carry: LISTEN (the worker's
 * pinned connection, waitForJob's, the cluster-wide events'). A pool of at most
 * DIRECT_POOL_MAX, opened at first use. Statements run on its connections are prepared:
 * nothing between them and the server forgets them.
 */
export class DirectPool {
  /** One LISTEN connection each for the worker, waitForJob and the queue events. */
  static readonly MAX = 3;
  private pool?: Pool;
  private readonly clients = new WeakSet<ClientBase>();

  constructor(
    private readonly url: string,
    /** The DataSource's pool options: what the URL leaves out comes from there. */
    private readonly base: () => PoolConfig,
  ) {}

  /** The pool, made at first use. */
  get(): Pool {
    if (!this.pool) {
      const pool = new Pool({ ...this.config(), max: DirectPool.MAX });
      pool.on('connect', (client) => this.clients.add(client));
      pool.on('error', () => undefined); // an idle connection lost: the pool replaces it; its user's listener reconnects
      this.pool = pool;
    }
    return this.pool;
  }

  /** Whether `client` is one of this pool's (direct) connections. */
  has(client: unknown): boolean {
    return this.clients.has(client as ClientBase);
  }

  /** Connection options for a direct connection of one's own (a vacuum, the migrations' DataSource). */
  config(): PoolConfig {
    return directConnectionConfig(this.base(), this.url);
  }

  async end(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    await pool?.end();
  }
}

/**
 * The DataSource's pool options with the server `url` names instead. A URL with no query
 * string becomes separate settings, so that whatever it leaves out (user, password, even a
 * password function, database, ssl) stays as the DataSource has it; a URL with one (sslmode=…)
 * is given to pg whole, with the DataSource's user, password and database written into it
 * where it has none (pg reads every setting a connection string can hold from it, present or not).
 */
export function directConnectionConfig(base: PoolConfig, url: string): PoolConfig {
  const parsed = new URL(url);
  const { password } = base;
  const config: PoolConfig = { ...base, password, connectionString: undefined, max: undefined };
  if (parsed.search === '') {
    config.host = decodeURIComponent(parsed.hostname).replace(/^\[(.*)\]$/, '$1');
    if (parsed.port) config.port = Number(parsed.port);
    if (parsed.username) config.user = decodeURIComponent(parsed.username);
    if (parsed.password) config.password = decodeURIComponent(parsed.password);
    if (parsed.pathname.length > 1) config.database = decodeURIComponent(parsed.pathname.slice(1));
    return config;
  }
  if (!parsed.username && base.user) parsed.username = encodeURIComponent(base.user);
  if (!parsed.password && typeof password === 'string') parsed.password = encodeURIComponent(password);
  if (parsed.pathname.length <= 1 && base.database) parsed.pathname = `/${encodeURIComponent(base.database)}`;
  return { ...config, connectionString: parsed.toString() };
}
