import { Inject, Injectable } from '@nestjs/common';
import { JobQueueError } from '../core/errors';
import type { JobSpec } from '../core/job';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { validateJob, type ValidJob } from '../core/validate-job-spec';
import { TaskRegistry } from '../discovery/task-registry';

/** Checks a job before it is added (add, addMany, addFlow, ctx.continueWith): the spec, the payload, and that some app runs the task. */
@Injectable()
export class JobSpecValidator {
  constructor(
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
    private readonly tasks: TaskRegistry,
  ) {}

  /** Task options fill in what the spec leaves out; the task must be one this app knows. */
  validate(identifier: string, payload: unknown, spec: Omit<JobSpec, 'manager'> & { manager?: unknown }): ValidJob {
    const task = typeof identifier === 'string' ? this.tasks.get(identifier) : undefined;
    const defaults = task?.options;
    const { manager: _manager, ...rest } = spec ?? {};
    const job = validateJob(
      identifier,
      payload,
      {
        ...rest,
        queueName: rest.queueName ?? defaults?.queueName,
        priority: rest.priority ?? defaults?.priority,
        maxAttempts: rest.maxAttempts ?? defaults?.maxAttempts,
      },
      this.options.maxJsonBytes,
    );
    const { externalTasks } = this.options;
    if (!task && externalTasks !== '*' && !externalTasks.has(job.identifier)) {
      throw new JobQueueError(
        'JQ_UNKNOWN_TASK',
        `no @Task('${job.identifier}') in this app: check the name, or list it in the externalTasks option if another app runs it`,
      );
    }
    return job;
  }
}
