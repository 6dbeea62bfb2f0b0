/**
 * NOTIFYs sent after a commit, in a transaction of their own, by the statements that run in a
 * transaction of ours (JobQueueDatabase.runGenericPlan's `after`, db/after-commit.ts): an add or
 * addMany without a caller's manager (addJobKeylessQuiet, addJobsBulkQuiet) and a release
 * (releaseJobsQuiet).
 *
 * Why: PostgreSQL queues notifications under one lock for the whole server, which a transaction
 * that NOTIFYs takes at its commit and holds until its commit record is flushed to disk. So
 * every add and release that NOTIFYs in its own transaction waits for the fsyncs of the others
 * in turn, and none shares another's flush: under a steady stream of single adds from several
 * processes, those waits were the queue's p99 (docs/benchmark.md, "Sustained load"). A NOTIFY
 * in a transaction of its own that does not wait for its flush (`unflushed`) holds the lock for
 * microseconds. A listener still hears it only once
 * the job's (or the release's) transaction committed, as before. An add in a caller's
 * transaction NOTIFYs in it, as it must: only its commit may wake a worker.
 */
import { quoteLiteral, timestampLiteral } from './identifier';

/** The longest list of ids one NOTIFY of the finished channel carries; a longer one is told as '*' (a payload must stay under 8,000 bytes). */
export const MAX_TOLD_IDS_LENGTH = 7900;

/**
 * `notify` in a transaction of its own that does not wait for its commit record's flush: a
 * NOTIFY takes a transaction id, so its commit writes WAL, and a synchronous commit would wait
 * for one more fsync per add (100 µs of the server's CPU an add, measured). A notification is
 * never kept over a crash anyway; it is delivered at the commit all the same.
 */
function unflushed(notify: string): string[] {
  return ['begin', 'set local synchronous_commit = off', notify, 'commit'];
}

/**
 * The NOTIFY addJobKeyless sends: the jobs channel, if the job added for `runAt` (null for now)
 * is due by the server's clock. With `jobs` (the quoted jobs table), its payload is the id the
 * add drew on this connection (its sequence's currval), as addJobKeylessNamed's own NOTIFY names a
 * job in no named queue (sql/add.ts jobNamed); without, '' (addMany: claim whatever is next).
 */
export function notifyIfDue(channel: string, runAt: Date | null, jobs?: string): string[] {
  const due = runAt === null ? '' : ` where ${timestampLiteral(runAt)}::timestamptz <= now()`;
  const payload = jobs ? `currval(pg_get_serial_sequence(${quoteLiteral(jobs)}, 'id'))::text` : `''`;
  return unflushed(`select pg_notify(${quoteLiteral(channel)}, ${payload})${due}`);
}

/**
 * The NOTIFY releaseJobs sends to waiters (sql/finished.ts tellFinished), naming every job a
 * flush completed or failed: a failure that is retried names a job that has not finished, and
 * its waiter reads it and waits on. None when `ids` is empty.
 */
export function notifyFinished(channel: string, ids: readonly string[]): string[] {
  if (ids.length === 0) return [];
  const listed = ids.join(',');
  return unflushed(`select pg_notify(${quoteLiteral(channel)}, ${quoteLiteral(listed.length <= MAX_TOLD_IDS_LENGTH ? listed : '*')})`);
}
