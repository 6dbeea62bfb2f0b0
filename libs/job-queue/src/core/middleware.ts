import type { JobContext } from './job-context';

/** What a middleware sees of the attempt it wraps: the handler's context, its payload and task. */
export interface JobMiddlewareContext extends JobContext {
  task: string;
  payload: unknown;
}

/**
 * Wraps every handler (`JobQueueModule.forRoot({ middleware: [...] })`), for logging,
 * metrics or context: call `next()` to run the rest of the chain and the handler, and return
 * what it returns (the job's result); throw to fail the attempt. The first in the list is the
 * outermost. Runs for `runTask()` of nestjs-job-queue/testing too.
 */
export type JobMiddleware = (ctx: JobMiddlewareContext, next: () => Promise<unknown>) => Promise<unknown>;

/** The chain of middleware around `handler`, the first outermost. */
export function withMiddleware(middleware: readonly JobMiddleware[], ctx: JobMiddlewareContext, handler: () => unknown): () => Promise<unknown> {
  return middleware.reduceRight<() => Promise<unknown>>((next, wrap) => () => wrap(ctx, next), async () => handler());
}
