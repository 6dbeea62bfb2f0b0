/**
 * The chaos run's ledger, in schema `chaos`, outside the queue's: what the producers committed
 * and rolled back, every handler attempt (start, end, process), the writes of transactional
 * handlers (committed with their job's completion, or not at all), the cancels asked for, and
 * the faults caused. The checker (invariants.ts) reads nothing else besides the queue's tables.
 */
import type { Client } from 'pg';

export const LEDGER_SCHEMA = `
  create schema if not exists chaos;
  -- one row per committed add, written in the add's own transaction
  create table chaos.produced (
    key text primary key,
    kind text not null,
    job_id bigint not null,
    queue_name text,
    job_key text,
    version integer,
    after text[] not null default '{}',
    expect text not null,
    at timestamptz not null default clock_timestamp()
  );
  -- adds whose transaction the producer rolled back on purpose (best effort: written after the rollback)
  create table chaos.rolled_back (key text primary key, kind text not null);
  create table chaos.attempts (
    id bigserial primary key,
    key text not null,
    kind text not null,
    job_id bigint not null,
    queue_name text,
    attempt integer not null,
    pid integer not null,
    started_at timestamptz not null default clock_timestamp(),
    ended_at timestamptz,
    outcome text,
    planned_ms integer not null default 0
  );
  create index on chaos.attempts (key);
  -- written through ctx.manager: exists only if the attempt's completion committed
  create table chaos.effects (attempt_id bigint primary key, key text not null, job_id bigint not null, at timestamptz not null default clock_timestamp());
  create table chaos.cancels (job_id bigint not null, accepted boolean not null, code text, at timestamptz not null default clock_timestamp());
  -- what the workers told of themselves: worker:fenced (declared dead, rejoined) and the leader's job:rescued
  create table chaos.worker_events (pid integer not null, type text not null, job_id bigint, dead_worker text, at timestamptz not null default clock_timestamp());
  create table chaos.faults (id serial primary key, kind text not null, pid integer, started_at timestamptz not null, ended_at timestamptz not null, detail text);
`;

export async function createLedger(sql: Client): Promise<void> {
  await sql.query(LEDGER_SCHEMA);
}

/** Kinds of job, as producers add them and handlers record them. */
export const KINDS = ['plain', 'queued', 'keyed', 'slow', 'cancellable', 'step', 'limited', 'tick'] as const;
export type Kind = (typeof KINDS)[number];

/** The chaos tasks' identifiers: `chaos.<kind>`. */
export const taskOf = (kind: Kind): string => `chaos.${kind}`;

/**
 * Attempts per job. The producer passes them on every add: it runs no worker, so the tasks'
 * own options (which would fill them in) are not in its app. slow's two both time out.
 */
export const MAX_ATTEMPTS = 3;
export const SLOW_MAX_ATTEMPTS = 2;

/** The worker settings of a run: short, so that rescues happen within it. */
export const HEARTBEAT_MS = 500;
export const WORKER_TIMEOUT_MS = 3000;
/** The globalConcurrency of chaos.limited. */
export const LIMIT = 2;
/** chaos.slow's timeout; its handlers sleep longer. */
export const SLOW_TIMEOUT_MS = 300;
