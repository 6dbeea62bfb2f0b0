/**
 * What the benchmark's do-nothing task handlers report to: how many have started, and when
 * the next one starts. Both job queues' handlers call `hit()` first thing, with the job's
 * `at` (the wall clock of its add, in the sustained lines' payloads) when it has one.
 */
export class HandlerProbe {
  /** Told each start of a job whose payload has `at`: that add's and this start's wall clock (epoch ms, fractional). */
  onStart?: (addedAt: number, startedAt: number) => void;
  private count = 0;
  private lastAt = 0;
  private countWaiter?: { target: number; resolve: () => void; reject: (error: Error) => void; timer: NodeJS.Timeout };
  private startWaiter?: { resolve: (at: number) => void; reject: (error: Error) => void; timer: NodeJS.Timeout };

  hit(addedAt?: number): void {
    const at = performance.now();
    if (addedAt !== undefined) this.onStart?.(addedAt, performance.timeOrigin + at);
    this.count += 1;
    this.lastAt = at;
    const start = this.startWaiter;
    if (start) {
      this.startWaiter = undefined;
      clearTimeout(start.timer);
      start.resolve(at);
    }
    const counted = this.countWaiter;
    if (counted && this.count >= counted.target) {
      this.countWaiter = undefined;
      clearTimeout(counted.timer);
      counted.resolve();
    }
  }

  /** Handlers started since the last reset: what a worker process reports to the bench (worker-process.ts). */
  get started(): number {
    return this.count;
  }

  /** The performance.now() at which the latest of them started. */
  get lastStartAt(): number {
    return this.lastAt;
  }

  /** Resolves once `target` handlers have started since the last reset. */
  untilCount(target: number, timeoutMs: number): Promise<void> {
    if (this.count >= target) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.countWaiter = undefined;
        reject(new Error(`only ${this.count} of ${target} jobs ran within ${timeoutMs} ms`));
      }, timeoutMs);
      this.countWaiter = { target, resolve, reject, timer };
    });
  }

  /** Resolves with the performance.now() at which the next handler starts. */
  nextStart(timeoutMs: number): Promise<number> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.startWaiter = undefined;
        reject(new Error(`no job started within ${timeoutMs} ms`));
      }, timeoutMs);
      this.startWaiter = { resolve, reject, timer };
    });
  }

  /** Zeroes the count and fails whatever still waits, so no timer outlives a measurement. */
  reset(): void {
    this.count = 0;
    this.lastAt = 0;
    for (const waiter of [this.countWaiter, this.startWaiter]) {
      if (!waiter) continue;
      clearTimeout(waiter.timer);
      waiter.reject(new Error('the probe was reset'));
    }
    this.countWaiter = undefined;
    this.startWaiter = undefined;
  }
}
