import type { RegisteredTask } from '../discovery/task-registry';
import type { Job } from '../core/job';
import type { JobOutcome } from '../core/job-outcome';
import { handlerContext, type RunJobContext } from './attempt-context';
import { withMiddleware } from '../core/middleware';

/** Calls the task's handler with its payload and context; never throws. */
export async function runJob(task: RegisteredTask, job: Job, context: RunJobContext): Promise<JobOutcome> {
  const { middleware = [] } = context;
  const ctx = handlerContext(job, context);
  try {
    if (middleware.length === 0) return { ok: true, result: await task.handler(job.payload, ctx) };
    const chain = withMiddleware(middleware, { ...ctx, task: task.identifier, payload: job.payload }, () => task.handler(job.payload, ctx));
    return { ok: true, result: await chain() };
  } catch (error) {
    return { ok: false, error };
  }
}
