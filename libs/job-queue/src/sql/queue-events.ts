import { QUEUE_EVENT_EXTRAS, type QueueEventType } from '../core/queue-events';

/**
 * Cluster-wide job events (core/queue-events.ts): who listens (`event_listeners`), and the
 * fragments that publish events in the statements that write them (sql/release.ts,
 * sql/admin.ts), so that only what commits is heard. `s` is the quoted schema, `channel` the
 * jobs channel (a listener that comes or goes tells workers there, payload 'listeners'),
 * `events` the events channel.
 */

/** An event at most this long (bytes of JSON) shares a notification with others; a longer one has one of its own. */
const SHARED_EVENT_BYTES = 3900;
/**
 * A result longer than this (bytes of JSON) is left out of its event, which says
 * `resultTruncated`: with the other fields at their longest (an error or a cancel reason cut
 * at ERROR_CHARS, names of 128 characters) an event stays under NOTIFY's 8,000 bytes.
 */
const MAX_RESULT_BYTES = 6000;
/** An error message or cancel reason is cut at this many characters in an event (getJob() has it whole). */
const ERROR_CHARS = 1000;

/**
 * "Filter `filter` (a jsonb parameter, null when nobody listens) wants events of `type` for
 * task `task`". Its first conjunct is a constant for the statement, so with no listener the
 * planner skips the rows altogether.
 */
export const wantsEvent = (filter: string, type: string, task: string) =>
  `${filter}::jsonb is not null and (${filter}::jsonb -> '${type}' = 'true'::jsonb or ${filter}::jsonb -> '${type}' ? ${task})`;

/** An error message or reason, cut for an event. */
export const eventText = (text: string) => `left(${text}, ${ERROR_CHARS})`;

/** A time as whole epoch milliseconds (the events' times: cheaper to write and to read than ISO text). */
export const epochMs = (time: string) => `floor(date_part('epoch', ${time}) * 1000)::int8`;

/** A job's result (jsonb) for its event: left out when too long, with `resultTruncated`. The extras of a job:completed event. */
export const eventResult = (result: string) => ({
  result: `case when octet_length(${result}::text) <= ${MAX_RESULT_BYTES} then ${result} end`,
  resultTruncated: `octet_length(${result}::text) > ${MAX_RESULT_BYTES}`,
});

/**
 * The event of `type` for row `r` (a jobs or finished_jobs row) as JSON text, in the wire
 * format of core/queue-events.ts: the common fields, then `extras` (SQL expressions by name)
 * in the order QUEUE_EVENT_EXTRAS gives. json, not jsonb: it is only ever sent as text.
 */
export function queueEvent<Type extends QueueEventType>(type: Type, r: string, extras: Record<(typeof QUEUE_EVENT_EXTRAS)[Type][number], string>): string {
  const fields = QUEUE_EVENT_EXTRAS[type].map((name: string) => (extras as Record<string, string>)[name]);
  return `json_build_array('${type}', ${r}.id::text, ${r}.task_identifier, ${r}.queue_name, ${r}.attempts, ${r}.max_attempts,
     ${epochMs(`${r}.created_at`)}, ${fields.join(', ')})::text`;
}

/**
 * Publishes the events `events` selects (a query of one text column of JSON arrays) on the
 * events channel, in as few notifications as fit: each under 8,000 bytes, small events
 * together (in groups of up to two SHARED_EVENT_BYTES, by a running total of their lengths
 * in the order they come), a big one alone. One row per notification, for a CTE.
 */
export const publishEvents = (eventsChannel: string, events: string) => `
  select pg_notify('${eventsChannel}', '{"at":' || ${epochMs('now()')} || ',"events":[' || string_agg(event, ',') || ']}')
  from (
    select event, case when bytes > ${SHARED_EVENT_BYTES} then -total else total / ${SHARED_EVENT_BYTES} end as part
    from (
      select event, bytes, sum(bytes) over (rows between unbounded preceding and current row) as total
      from (select e as event, octet_length(e) as bytes from (${events}) as published(e)) sized
    ) counted
  ) parted
  group by part`;

export function createQueueEventQueries(s: string, channel: string, events: string) {
  /** Wakes every worker to read the listeners again (the jobs channel's 'listeners' payload). */
  const tellWorkers = `select pg_notify('${channel}', 'listeners')`;

  return {
    /**
     * Registers listener $1 with filter $2 (jsonb) until $3 ms from now, or changes its
     * filter; deletes listeners that expired a minute ago (their processes died); tells workers.
     */
    putEventListener: `
      with put as (
        insert into ${s}.event_listeners (id, filter, expires_at) values ($1, $2::jsonb, now() + $3 * interval '1 millisecond')
        on conflict (id) do update set filter = excluded.filter, expires_at = excluded.expires_at
        returning id
      ),
      expired as (delete from ${s}.event_listeners where expires_at < now() - interval '1 minute'),
      told as (${tellWorkers})
      select (select count(*) from put)::int as put, (select count(*) from told)::int as told`,

    /** Keeps listener $1 alive for $2 ms more; no row back when it expired and was deleted meanwhile. */
    renewEventListener: `update ${s}.event_listeners set expires_at = now() + $2 * interval '1 millisecond' where id = $1 returning id`,

    /** Removes listener $1 and tells workers, who stop publishing what only it wanted. */
    dropEventListener: `
      with dropped as (delete from ${s}.event_listeners where id = $1)
      ${tellWorkers}`,

    /** The filters of the live listeners: what releases publish. */
    eventListenerFilters: `select filter from ${s}.event_listeners where expires_at > now()`,

    /** Publishes job $1's cancel (cancelJob finished it as cancelled) if filter $2 wants it. */
    publishCancelled: `
      with published as (${publishEvents(
        events,
        `select ${queueEvent('job:cancelled', 'f', { reason: eventText(`nullif(regexp_replace(f.last_error, '^JQ_JOB_CANCELLED: ', ''), 'cancelled')`) })}
         from ${s}.finished_jobs f where f.id = $1::bigint and f.state = 'cancelled' and ${wantsEvent('$2', 'job:cancelled', 'f.task_identifier')}`,
      )})
      select count(*)::int as published from published`,

    /**
     * Publishes the cancels of flow $1's jobs that this transaction finished as cancelled (cancelFlow:
     * its blocked and waiting jobs; a running one's worker publishes its own) if filter $2 wants
     * them. finished_at is the finishing transaction's now().
     */
    publishFlowCancelled: `
      with published as (${publishEvents(
        events,
        `select ${queueEvent('job:cancelled', 'f', { reason: eventText(`nullif(regexp_replace(f.last_error, '^JQ_JOB_CANCELLED: ', ''), 'cancelled')`) })}
         from ${s}.finished_jobs f
         where (f.flow_id = $1::bigint or (f.id = $1::bigint and f.flow_id is null)) and f.state = 'cancelled' and f.finished_at = now()
           and ${wantsEvent('$2', 'job:cancelled', 'f.task_identifier')}`,
      )})
      select count(*)::int as published from published`,
  };
}
