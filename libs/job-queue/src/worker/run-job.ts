import type { RegisteredTask } from '../discovery/task-registry';
import type { Job } from '../core/job';
import type { JobOutcome } from '../core/job-outcome';
import { handlerContext, type RunJobContext } from './attempt-context';
import { withMiddleware } from '../core/middleware';
import { settleBatch } from '../core/handler-outcomes';

/**
 * Calls the task's handler with its payload and context; never throws. An array it returns
 * may hold promises, one per element of a batch job's payload: they are settled here
 * (settleBatch), inside the middleware, so that the attempt ends when they do.
 */
export async function runJob(task: RegisteredTask, job: Job, context: RunJobContext): Promise<JobOutcome> {
  const { middleware = [] } = context;
  const ctx = handlerContext(job, context);
  try {
    if (middleware.length === 0) {
      const result = await task.handler(job.payload, ctx);
      return { ok: true, result: Array.isArray(result) ? await settleBatch(job.payload, result) : result };
    }
    const handler = async () => {
      const result = await task.handler(job.payload, ctx);
      return Array.isArray(result) ? settleBatch(job.payload, result) : result;
    };
    const chain = withMiddleware(middleware, { ...ctx, task: task.identifier, payload: job.payload }, handler);
    return { ok: true, result: await chain() };
  } catch (error) {
    return { ok: false, error };
  }
}
