/** The default backoff, as graphile-worker: exp(min(10, attempts)) seconds (2.7 s, 7.4 s, … at most 6.1 h). */
export function defaultRetryDelayMs(attempts: number): number {
  return Math.exp(Math.min(10, attempts)) * 1000;
}
