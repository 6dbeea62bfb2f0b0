import { Option, type Command } from 'commander';
import { JOB_STATES } from '../core/job-state';
import { requireJobTables, withConnection, type CliConnection, type ConnectionOptions } from './connection';
import { EXIT, type SetExitCode } from './exit-codes';
import { cancelJobs, retryFailedJobs, retryJobs, type Refusal } from './jobs-actions';
import { listJobs, showJob, type ListOptions } from './jobs-read';
import { printJob, printJobTable } from './job-text';
import { printJson, printLine, printNote } from './output';

/** `jobs list|show|retry|cancel|retry-failed`: what JobQueueService does, by its SQL. */
export function registerJobs(program: Command, setExitCode: SetExitCode): void {
  const jobs = program.command('jobs').description('list, show, retry and cancel jobs');
  /** Runs `work` on a connection to a schema that has its job tables. */
  const onJobs = <T>(command: Command, work: (connection: CliConnection) => Promise<T>) =>
    withConnection(command.optsWithGlobals<ConnectionOptions>(), async (connection) => {
      await requireJobTables(connection);
      return work(connection);
    });

  jobs
    .command('list')
    .description('jobs, newest unfinished first, then the last finished (as JobQueueService.listJobs)')
    .addOption(new Option('--state <state>', 'only jobs in this state').choices(JOB_STATES))
    .option('--task <task>', 'only jobs of this task')
    .option('--queue <queue>', 'only jobs of this named queue')
    .option('--limit <n>', 'at most this many, 1 to 1000', '50')
    .option('--json', 'print one JSON document')
    .action(async (options: ListOptions & { json?: boolean }, command: Command) => {
      const page = await onJobs(command, (connection) => listJobs(connection, options));
      if (options.json) printJson({ jobs: page });
      else printJobTable(page);
      setExitCode(EXIT.ok);
    });

  jobs
    .command('show')
    .argument('<id>', 'the job id')
    .description('one job, unfinished or finished, with its errors (exit 5 when there is none)')
    .option('--json', 'print one JSON document')
    .action(async (id: string, options: { json?: boolean }, command: Command) => {
      const job = await onJobs(command, (connection) => showJob(connection, id));
      if (options.json) printJson(job);
      else printJob(job);
      setExitCode(EXIT.ok);
    });

  jobs
    .command('retry')
    .argument('<ids...>', 'job ids')
    .description('put failed or cancelled jobs back in the queue, due now, attempts reset (exit 5 if some were not)')
    .option('--json', 'print one JSON document')
    .action(async (ids: string[], options: { json?: boolean }, command: Command) => {
      const { retried, refused } = await onJobs(command, (connection) => retryJobs(connection, ids));
      if (options.json) printJson({ retried, refused });
      else printLine(retried.length > 0 ? `Retried ${retried.length}: ${retried.map((job) => job.id).join(', ')}` : 'Retried none.');
      setExitCode(reportRefusals(refused));
    });

  jobs
    .command('cancel')
    .argument('<ids...>', 'job ids')
    .description('cancel unfinished jobs; a running one is aborted by its worker (exit 5 if some could not be)')
    .option('--reason <text>', 'recorded as the jobs’ error')
    .option('--json', 'print one JSON document')
    .action(async (ids: string[], options: { reason?: string; json?: boolean }, command: Command) => {
      const { done, refused } = await onJobs(command, (connection) => cancelJobs(connection, ids, options.reason));
      if (options.json) printJson({ cancelled: done, refused });
      else {
        for (const { id, outcome, job } of done) {
          printLine(outcome === 'cancelled' ? `Cancelled ${id}.` : `Cancel of ${id} requested: worker ${job?.workerId ?? '?'} aborts it and ends it cancelled.`);
        }
      }
      setExitCode(reportRefusals(refused));
    });

  jobs
    .command('retry-failed')
    .description('retry every failed job of a task that retention still keeps (as JobQueueService.retryFailedJobs)')
    .requiredOption('--task <task>', 'the task')
    .option('--json', 'print one JSON document')
    .action(async (options: { task: string; json?: boolean }, command: Command) => {
      const retried = await onJobs(command, (connection) => retryFailedJobs(connection, options.task));
      if (options.json) printJson({ task: options.task, retried });
      else printLine(`Retried ${retried} failed job${retried === 1 ? '' : 's'} of ${options.task}.`);
      setExitCode(EXIT.ok);
    });
}

/** One line on stderr per id refused; exit 5 if any was. */
function reportRefusals(refused: Refusal[]): number {
  for (const { code, message } of refused) printNote(`${code}: ${message}`);
  return refused.length > 0 ? EXIT.refused : EXIT.ok;
}
