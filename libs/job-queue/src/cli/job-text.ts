import type { Job } from '../core/job';
import { formatTable, printLine, truncate } from './output';

const time = (date: Date | null) => (date ? date.toISOString() : '');
const json = (value: unknown) => JSON.stringify(value);

/** A page of jobs as a table: the newest unfinished first, then the last finished (listJobs's order). */
export function printJobTable(jobs: Job[]): void {
  if (jobs.length === 0) {
    printLine('No jobs.');
    return;
  }
  const rows = jobs.map((job) => [
    job.id,
    job.state,
    job.taskIdentifier,
    job.queueName ?? '',
    `${job.attempts}/${job.maxAttempts}`,
    time(job.finishedAt ?? job.runAt),
    truncate(job.lastError, 60),
  ]);
  for (const line of formatTable(['id', 'state', 'task', 'queue', 'attempts', 'run at / finished at', 'last error'], rows, [true])) printLine(line);
}

/** One job, every field, then its errors (one per failed attempt). */
export function printJob(job: Job): void {
  printLine(`Job ${job.id} (${job.taskIdentifier}): ${job.state}`);
  const fields: Array<[string, string]> = [
    ['queue', job.queueName ?? ''],
    ['payload', json(job.payload)],
    ['priority', String(job.priority)],
    ['attempts', `${job.attempts} of ${job.maxAttempts}`],
    ['run at', time(job.runAt)],
    ['created at', time(job.createdAt)],
    ['updated at', time(job.updatedAt)],
    ['started at', time(job.startedAt)],
    ['finished at', time(job.finishedAt)],
    ['key', job.key ?? ''],
    ['flags', job.flags.join(', ')],
    ['worker', job.workerId ?? ''],
    ['cancel requested at', time(job.cancelRequestedAt)],
    ['progress', job.progress === null ? '' : json(job.progress)],
    ['result', job.result === null ? '' : json(job.result)],
    ['last error', job.lastError ?? ''],
  ];
  for (const [name, value] of fields) if (value !== '') printLine(`  ${name.padEnd(20)}${value}`);
  if (job.errors.length > 0) {
    printLine('  errors:');
    for (const error of job.errors) printLine(`    attempt ${error.attempt} at ${time(error.at)}: ${error.code ? `${error.code}: ` : ''}${truncate(error.message, 200)}`);
  }
}
