/**
 * How long after a general claim found nothing more waiting a fetch may claim only the jobs
 * NOTIFYs named (sql claimJobsById): a job that became claimable unnamed since (a retry or a
 * scheduled job come due, a row a claim skipped) waits at most this long behind them.
 */
const NAMED_CLAIMS_MS = 100;

/**
 * What woke the worker's fetch (worker/producer.ts) since the fetch under way began: NOTIFYs
 * naming jobs added alone (sql/add.ts jobNamed), or a wake-up for whatever is next (a poll, a
 * NOTIFY naming none, a freed slot, a timer). From it, whether the next fetch claims the named
 * jobs alone (a claim of a few plan nodes) or whatever is next (the general claim).
 */
export class WakeUps {
  private readonly named = new Set<string>();
  private forAny = false;
  private drainedAt = -Infinity;

  /** A wake-up for whatever is next. */
  any(): void {
    this.forAny = true;
  }

  /** A NOTIFY named job `id`. */
  job(id: string): void {
    this.named.add(id);
  }

  /** A general claim found nothing more waiting. */
  drained(): void {
    this.drainedAt = performance.now();
  }

  /**
   * At a fetch's start: the named jobs to claim alone, if only NOTIFYs naming jobs woke it and a
   * general claim found nothing more waiting a moment ago (and none since found more:
   * `moreMayBeWaiting`); else undefined, for the general claim. Forgets what woke it.
   */
  take(moreMayBeWaiting: boolean): string[] | undefined {
    const alone = !this.forAny && !moreMayBeWaiting && this.named.size > 0 && performance.now() - this.drainedAt < NAMED_CLAIMS_MS;
    const named = alone ? [...this.named] : undefined;
    this.named.clear();
    this.forAny = false;
    return named;
  }
}
