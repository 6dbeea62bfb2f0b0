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
