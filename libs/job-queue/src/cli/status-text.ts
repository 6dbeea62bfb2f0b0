import { JOB_STATES } from '../core/job-state';
import { formatSeconds, formatTable, printLine } from './output';
import type { Status } from './status-report';

/** `status` for people: counts, then the oldest due job, workers and the leader. */
export function printStatus(status: Status): void {
  const total = JOB_STATES.reduce((sum, state) => sum + status.jobs.byState[state], 0);
  printLine(`Schema "${status.schema}": ${total} job${total === 1 ? '' : 's'}`);
  printLine();
  const tasks = Object.keys(status.jobs.byTask).sort();
  const rows = [
    ['(all)', ...JOB_STATES.map((state) => String(status.jobs.byState[state]))],
    ...tasks.map((task) => [task, ...JOB_STATES.map((state) => String(status.jobs.byTask[task][state]))]),
  ];
  for (const line of formatTable(['task', ...JOB_STATES], rows, [false, ...JOB_STATES.map(() => true)])) printLine(line);
  printLine();

  const { oldest, count } = status.due;
  printLine(
    oldest
      ? `Oldest due job: ${oldest.id} (${oldest.task}${oldest.queue ? `, queue ${oldest.queue}` : ''}), due ${formatSeconds(oldest.ageSeconds)} ago; ${count} due job${count === 1 ? '' : 's'} no worker holds`
      : 'Oldest due job: none (no due job waits for a worker)',
  );
  printLine();

  printLine(`Workers: ${status.workers.length}`);
  if (status.workers.length > 0) {
    const workerRows = status.workers.map((w) => [
      w.id,
      w.hostname ?? '',
      w.pid === null ? '' : String(w.pid),
      w.concurrency === null ? '' : String(w.concurrency),
      `${formatSeconds(w.heartbeatAgeSeconds)} ago${w.overdue ? ' (overdue)' : ''}`,
      String(w.running),
      String(w.prefetched),
    ]);
    for (const line of formatTable(['id', 'host', 'pid', 'concurrency', 'heartbeat', 'running', 'prefetched'], workerRows, [false, false, true, true, false, true, true])) {
      printLine(`  ${line}`);
    }
  }
  printLine();

  const leader = status.maintenanceLeader;
  if (!leader) printLine('Maintenance leader: none (no worker has taken the lease)');
  else if (!leader.live) printLine(`Maintenance leader: none now (the lease of ${leader.holder} expired ${formatSeconds(leader.expiresInSeconds)} ago)`);
  else printLine(`Maintenance leader: ${leader.holder}${describeWorker(status, leader.holder)}, lease renewed for ${formatSeconds(leader.expiresInSeconds)} more`);
}

function describeWorker(status: Status, id: string): string {
  const worker = status.workers.find((w) => w.id === id);
  return worker?.hostname ? ` (${worker.hostname}, pid ${worker.pid})` : '';
}
