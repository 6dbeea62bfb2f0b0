/** Waits with exponential backoff between retries of a failing query or connection: 100 ms doubling to 10 s. */
export function backoffMs(failures: number): number {
  return Math.min(10_000, 100 * 2 ** Math.max(0, failures - 1));
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}

/** The longest delay Node's timers keep: a longer one fires at once. */
const MAX_TIMER_MS = 2_147_483_647;

/** A delay for setTimeout: at most MAX_TIMER_MS (whoever waits longer sets the timer again when it fires early), never negative. */
export function timerDelay(ms: number): number {
  return Math.min(MAX_TIMER_MS, Math.max(0, Math.ceil(ms)));
}
