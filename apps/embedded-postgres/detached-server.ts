/**
 * Runs an embedded PostgreSQL in a process of its own, for `npm start`: started detached
 * from the terminal by startDetachedEmbeddedPostgres, so that Ctrl-C reaches the app (which
 * then drains its worker against a database still up) and not PostgreSQL. It stops the
 * server when its parent asks, or when its parent is gone (the IPC channel closes).
 *
 * It tells its parent `{ url, dataDir }` once the server is up (dataDir: where the data is
 * kept, see relocateUnreachableDataDir), or `{ error }` if it could not start it.
 */
import { startEmbeddedPostgres } from './index';

async function main() {
  const server = await startEmbeddedPostgres({ dataDir: process.argv[2], persistent: true, relocateUnreachableDataDir: true });
  let stopping: Promise<void> | undefined;
  const stop = () => (stopping ??= server.stop().finally(() => process.exit(0)));
  process.on('disconnect', stop);
  process.on('message', (message) => message === 'stop' && stop());
  process.send!({ url: server.url, dataDir: server.dataDir });
}

main().catch((error: unknown) => {
  const message = error instanceof Error ? error.message : String(error);
  if (process.connected) process.send!({ error: message }, () => process.exit(1));
  else {
    console.error(error);
    process.exit(1);
  }
});
