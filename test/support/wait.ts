/**
 * Waiting for conditions instead of sleeping. Every wait names what it awaits, so a
 * timeout says what never happened; the time limits are generous and only catch hangs.
 * A child process that crashed (see worker-processes.ts) fails every wait at once, with
 * its output, rather than letting the test time out on a mystery.
 */
import type { Observable } from 'rxjs';

/** How long a wait may take before it is a hang: long enough for a loaded CI machine. */
export const HANG_MS = 60_000;

const crashes: Error[] = [];

/** Makes every pending and later wait fail with `error` (a helper's child process crashed). */
export function reportCrash(error: Error): void {
  crashes.push(error);
}

/** Forgets the crashes reported so far (once a test has failed on them). */
export function clearCrashes(): void {
  crashes.length = 0;
}

/** Throws the first crash reported so far, if any. */
export function throwIfCrashed(): void {
  if (crashes.length > 0) throw crashes[0];
}

/**
 * Resolves when `predicate` holds, checking every 20 ms; rejects with `what` after
 * `timeoutMs` (a function, to describe the last state seen).
 */
export async function waitFor(what: string | (() => string), predicate: () => boolean | Promise<boolean>, timeoutMs = HANG_MS): Promise<void> {
  const started = Date.now();
  for (;;) {
    throwIfCrashed();
    if (await predicate()) return;
    if (Date.now() - started > timeoutMs) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * The first event on `events$` that matches, from now on: subscribe before causing it.
 * Rejects with `what` after `timeoutMs`, or when a child process crashes.
 */
export function nextEvent<E, M extends E = E>(
  events$: Observable<E>,
  what: string,
  matches: ((event: E) => event is M) | ((event: E) => boolean),
  timeoutMs = HANG_MS,
): Promise<M> {
  return new Promise<M>((resolve, reject) => {
    const timer = setInterval(() => {
      try {
        throwIfCrashed();
      } catch (error) {
        finish();
        reject(error);
      }
    }, 100);
    const deadline = setTimeout(() => {
      finish();
      reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
    }, timeoutMs);
    const subscription = events$.subscribe((event) => {
      if (!matches(event)) return;
      finish();
      resolve(event as M);
    });
    function finish() {
      clearInterval(timer);
      clearTimeout(deadline);
      subscription.unsubscribe();
    }
  });
}

export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }>;
}

/** Resolves when the first column of `query`'s first row equals `expected` (a count, usually). */
export async function waitForValue(sql: Queryable, what: string, query: string, expected: unknown, values: unknown[] = []): Promise<void> {
  let last: unknown;
  await waitFor(
    () => `${what} (expected ${JSON.stringify(expected)}, last saw ${JSON.stringify(last)})`,
    async () => {
      const row = (await sql.query(query, values)).rows[0];
      last = row ? Object.values(row)[0] : undefined;
      return last === expected;
    },
  );
}

/** Resolves when the jobs table is empty: every job ran and its completion was written. */
export function waitForNoJobs(sql: Queryable, schema = 'job_queue'): Promise<void> {
  return waitForValue(sql, 'the queue to drain', `select count(*)::int from ${schema}.jobs`, 0);
}
