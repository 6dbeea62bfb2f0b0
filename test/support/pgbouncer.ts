/**
 * PgBouncer in transaction mode in front of the tests' PostgreSQL (DATABASE_URL, or the
 * embedded one run-tests.ts started), for the pooling tests: `usePgBouncer()` in a describe()
 * starts one of its own in `before` (on a free port, apps/pgbouncer), to stop in its `after`;
 * its `through(url)` is a test database's URL by way of it. Debian's `pgbouncer` (1.18: no
 * protocol-level prepared statements); .ci/run installs it. Without it the tests are skipped
 * with a message saying so, and with CI set they fail instead.
 */
import { before } from 'node:test';
import { NO_PGBOUNCER_MESSAGE, pgbouncerPath, startPgBouncer, type PgBouncer, type PgBouncerOptions } from '../../apps/pgbouncer';
import { serverUrl } from './database';

/** Whether the pooling tests run here; throws under CI when PgBouncer is missing. */
export function pgbouncerAvailable(): boolean {
  if (pgbouncerPath()) return true;
  if (process.env.CI) throw new Error(`CI is set and ${NO_PGBOUNCER_MESSAGE}`);
  return false;
}

/** The `skip` option of a describe() that needs PgBouncer: false, or why it is skipped. */
export function skipWithoutPgBouncer(): string | false {
  return pgbouncerAvailable() ? false : `${NO_PGBOUNCER_MESSAGE}: the pooling tests did not run`;
}

/**
 * Starts PgBouncer in `before` of the describe() it is called in: `get()` gives it once
 * started; `stop()`, for the describe's own `after`, once what connects through it is closed
 * (an app closing through a stopped pooler retries its last statements for a while).
 */
export function usePgBouncer(options?: PgBouncerOptions): { get(): PgBouncer; stop(): Promise<void> } {
  let bouncer: PgBouncer | undefined;
  before(async () => {
    bouncer = await startPgBouncer(serverUrl(), options);
  });
  return {
    get() {
      if (!bouncer) throw new Error('PgBouncer is not started yet (usePgBouncer() starts it in before)');
      return bouncer;
    },
    async stop() {
      await bouncer?.stop();
      bouncer = undefined;
    },
  };
}
