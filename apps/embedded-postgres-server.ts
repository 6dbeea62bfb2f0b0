/**
 * Runs an embedded PostgreSQL in a process of its own, for `npm start`: started detached
 * from the terminal by startDetachedEmbeddedPostgres, so that Ctrl-C reaches the app (which
 * then drains its worker against a database still up) and not PostgreSQL. It stops the
 * server when its parent asks, or when its parent is gone (the IPC channel closes).
 */
import { startEmbeddedPostgres } from './embedded-postgres';

async function main() {
  const dataDir = process.argv[2];
  const server = await startEmbeddedPostgres({ dataDir, persistent: true });
  let stopping: Promise<void> | undefined;
  const stop = () => (stopping ??= server.stop().finally(() => process.exit(0)));
  process.on('disconnect', stop);
  process.on('message', (message) => message === 'stop' && stop());
  process.send!({ url: server.url });
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
