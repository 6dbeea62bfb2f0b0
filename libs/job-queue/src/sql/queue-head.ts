/**
 * Queue `queue`'s head as every statement sees it (the claim, the health check, the
 * dashboard): its first job by queue place, (priority, coalesce(first_run_at, run_at), id),
 * among the available ones with no cancel asked for that are due or wait for a retry, so
 * that a head waiting for its retry keeps its queue waiting. `columns` of that row, from
 * alias `e`; `s` is the quoted schema.
 *
 * Written as a first row by jobs_queue_order_idx, not as "no earlier row exists": that check
 * took 6 ms for the head of a 100,000-job queue, the first row 10 µs. Its condition fixes
 * queue_name, so the order it needs starts at priority, which jobs_fetch_queued_idx also
 * serves under an incremental sort of every queue's jobs: claims run with incremental sorts
 * off (worker/claim-connection.ts).
 */
export const queueHead = (queue: string, s: string, columns = 'e.id') => `select ${columns} from ${s}.jobs e
          where e.queue_name = ${queue} and e.is_available and e.cancel_requested_at is null and (e.run_at <= now() or e.attempts > 0)
          order by e.queue_name, e.priority, coalesce(e.first_run_at, e.run_at), e.id limit 1`;
