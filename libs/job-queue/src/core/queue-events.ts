import { JobQueueError } from './errors';
import type { JobProgress } from './job';

/** What every cluster-wide event says about its job, at the moment it happened (`at`, the database's clock). */
export interface QueueEventBase {
  jobId: string;
  taskIdentifier: string;
  queueName: string | null;
  /** Attempts made so far, this one included. */
  attempts: number;
  maxAttempts: number;
  createdAt: Date;
  at: Date;
}

/**
 * What happened to a job anywhere in the cluster, heard by every process that listens
 * (`@OnQueueEvent`, `JobQueueService.queueEvents$`): published in the transaction that
 * wrote it, so only what committed is heard. At most once: a process that was not
 * listening misses it. Names follow the worker's own events (`@OnJobEvent`) where they mean
 * the same.
 */
export type QueueEvent =
  /** The job succeeded. A result over 6,000 bytes of JSON is left out, with `resultTruncated` (a notification holds less than 8,000): read it with getJob(). */
  | (QueueEventBase & { type: 'job:completed'; result: unknown; resultTruncated?: true })
  /** An attempt failed (or the handler snoozed, code JQ_JOB_SNOOZED) and the job runs again at `retryAt`. Errors and reasons are cut at 1,000 characters. */
  | (QueueEventBase & { type: 'job:retrying'; error: string; code: string | null; retryAt: Date })
  /** The job failed for good. */
  | (QueueEventBase & { type: 'job:failed'; error: string; code: string | null })
  | (QueueEventBase & { type: 'job:cancelled'; reason: string | null })
  /** The handler reported progress (stored at most once a second, so not every value is published). */
  | (QueueEventBase & { type: 'job:progress'; progress: JobProgress })
  /**
   * A flow ended (its last job finished; see Flow's `state`). `jobId` and `flowId` are the
   * flow's id (its first job's), `taskIdentifier` its first job's task (what `tasks` filters
   * on); attempts and queue say nothing. Published by the statement that finished its last job.
   */
  | (QueueEventBase & { type: 'flow:completed'; flowId: string })
  /** A flow ended failed: `refs` are the steps that failed (or were cancelled) and failed it. */
  | (QueueEventBase & { type: 'flow:failed'; flowId: string; refs: string[] })
  | (QueueEventBase & { type: 'flow:cancelled'; flowId: string; refs: string[] });

export type QueueEventType = QueueEvent['type'];

/** The event of one type, for a listener's parameter: `@OnQueueEvent('job:failed') onFailed(event: QueueEventOf<'job:failed'>)`. */
export type QueueEventOf<Type extends QueueEventType> = Extract<QueueEvent, { type: Type }>;

const TYPES: Record<QueueEventType, true> = {
  'job:completed': true,
  'job:retrying': true,
  'job:failed': true,
  'job:cancelled': true,
  'job:progress': true,
  'flow:completed': true,
  'flow:failed': true,
  'flow:cancelled': true,
};
export const QUEUE_EVENT_TYPES = Object.keys(TYPES) as QueueEventType[];

/** Which events a listener wants: for each type, every task (`true`) or these tasks. Releases publish only what some listener wants. */
export type QueueEventFilter = Partial<Record<QueueEventType, true | string[]>>;

/** The filter of a listener of `types` (every type when empty), narrowed to `tasks` when given. Throws JQ_INVALID_EVENT for an unknown type. */
export function queueEventFilter(types: readonly string[], tasks?: readonly string[], where = 'a queue event listener'): QueueEventFilter {
  const filter: QueueEventFilter = {};
  for (const type of types.length > 0 ? types : QUEUE_EVENT_TYPES) {
    if (!(QUEUE_EVENT_TYPES as readonly string[]).includes(type)) {
      throw new JobQueueError('JQ_INVALID_EVENT', `${where}: '${type}' is no queue event; one of ${QUEUE_EVENT_TYPES.join(', ')}`);
    }
    filter[type as QueueEventType] = tasks === undefined ? true : [...tasks];
  }
  return filter;
}

/** One filter that wants whatever any of `filters` wants: what the cluster's releases publish. Null when nobody wants anything. */
export function mergeQueueEventFilters(filters: Iterable<QueueEventFilter>): QueueEventFilter | null {
  const merged: QueueEventFilter = {};
  for (const filter of filters) {
    for (const [type, tasks] of Object.entries(filter) as Array<[QueueEventType, true | string[]]>) {
      const before = merged[type];
      merged[type] = before === true || tasks === true ? true : [...new Set([...(before ?? []), ...tasks])];
    }
  }
  return Object.keys(merged).length > 0 ? merged : null;
}

/** Whether `filter` wants `event`. */
export function wantsQueueEvent(filter: QueueEventFilter, event: QueueEvent): boolean {
  const tasks = filter[event.type];
  return tasks === true || (tasks !== undefined && tasks.includes(event.taskIdentifier));
}

/**
 * The fields of each event type after the common ones, in the order the events channel sends
 * them. The wire format (sql/queue-events.ts writes it, queueEventsFromNotification reads
 * it): a notification is `{"at": <ms>, "events": [...]}`, each event an array
 * `[type, jobId, taskIdentifier, queueName, attempts, maxAttempts, createdAt ms, ...extras]`.
 * Arrays and epoch milliseconds rather than objects and ISO times: a process that listens
 * parses every job's event on the thread its own worker runs on.
 */
export const QUEUE_EVENT_EXTRAS = {
  'job:completed': ['result', 'resultTruncated'],
  'job:retrying': ['error', 'code', 'retryAt'],
  'job:failed': ['error', 'code'],
  'job:cancelled': ['reason'],
  'job:progress': ['progress'],
  'flow:completed': [],
  'flow:failed': ['refs'],
  'flow:cancelled': ['refs'],
} as const satisfies Record<QueueEventType, readonly string[]>;

/** The events of one notification on the events channel. */
export function queueEventsFromNotification(payload: string): QueueEvent[] {
  const { at, events } = JSON.parse(payload) as { at: number; events: unknown[][] };
  return events.map(([type, jobId, taskIdentifier, queueName, attempts, maxAttempts, createdAt, a, b, c]) => {
    const event = { type, jobId, taskIdentifier, queueName, attempts, maxAttempts, createdAt: new Date(createdAt as number), at: new Date(at) } as Record<string, unknown>;
    switch (type as QueueEventType) {
      case 'job:completed':
        if (b === true) event.resultTruncated = true;
        else event.result = a;
        break;
      case 'job:retrying':
        Object.assign(event, { error: a, code: b, retryAt: new Date(c as number) });
        break;
      case 'job:failed':
        Object.assign(event, { error: a, code: b });
        break;
      case 'job:cancelled':
        event.reason = a;
        break;
      case 'job:progress':
        event.progress = a;
        break;
      case 'flow:completed':
      case 'flow:failed':
      case 'flow:cancelled':
        event.flowId = jobId;
        if (type !== 'flow:completed') event.refs = a;
        break;
    }
    return event as unknown as QueueEvent;
  });
}
