import type { Logger } from '@nestjs/common';
import { Client, type ClientConfig } from 'pg';
import type { JobQueueDatabase } from '../db/job-queue-database';
import { quoteIdentifier } from '../sql/identifier';
import type { PinnedConnection } from '../db/pinned-connection';
import type { JobQueueEvents } from '../events/job-queue-events';

/** Dead row versions of `jobs` that make a vacuum worth it: at least this many… */
const MIN_DEAD_ROWS = 10_000;
/** …and at least this share of the live ones, so that a huge backlog is not vacuumed for a trickle. */
const MIN_DEAD_SHARE = 0.05;

/** The application_name of the vacuum's connection, as pg_stat_activity shows it. */
export const VACUUM_APPLICATION_NAME = `nestjs-job-queue vacuum ${process.pid}`;

/** A row of sql jobsVacuumState. */
interface VacuumState {
  dead_rows: number;
  live_rows: number;
  vacuums: number;
  may_vacuum: boolean;
}

/**
 * VACUUM of `jobs` by the maintenance leader, when enough of its rows died since the last.
 *
 * Why: every claim turns a job's row into a new version, and every release deletes it, so a
 * drain leaves two dead versions per job. Their entries stay in the fetch indexes, in front of
 * the jobs still waiting, until a vacuum removes them, and each claim walks past all of them
 * first: over a 400,000-job drain a claim of 250 went from 5.7 to 6.9 ms (SQL alone, no
 * vacuum), and stayed at 4.7 ms with one every few seconds. Autovacuum looks at a database
 * once a minute at most (autovacuum_naptime) and waits for a fifth of the table to die: far
 * too late for a queue that drains thousands of jobs a second.
 *
 * The vacuum runs on a short-lived connection of its own, never the pool's (handlers fill it)
 * nor the pinned one (heartbeats must not wait behind it), in the background of the
 * maintenance rounds, one at a time, with SKIP_LOCKED: it never waits for autovacuum or for a
 * migration's lock. A role that may not vacuum `jobs` (not its owner; from PostgreSQL 17, without
 * MAINTAIN on it): that is logged once and left to autovacuum. `vacuumJobs: false` turns it off.
 */
export class JobsVacuum {
  private running?: Promise<void>;
  private client?: Client;
  /** Dead rows the statistics still counted right after our last vacuum (ones it could not remove yet). */
  private leftByLast = 0;
  /** The table's vacuums (any, autovacuum's too) counted right after our last one. */
  private vacuumsByLast = 0;
  private refused = false;
  /** The vacuum's client is connecting. */
  private connecting = false;

  constructor(
    private readonly pinned: PinnedConnection,
    private readonly events: JobQueueEvents,
    private readonly db: JobQueueDatabase,
    private readonly schema: string,
    private readonly logger: Logger,
  ) {}

  /** Starts a vacuum in the background if enough rows died since the last one, and none is running. */
  async startIfDue(): Promise<void> {
    if (this.running || this.refused) return;
    const [state] = await this.pinned.run<VacuumState>('jobsVacuumState', []);
    if (!state.may_vacuum) {
      this.refused = true;
      this.logger.log(`The job queue's role may not VACUUM ${this.schema}.jobs (it needs to own it, or MAINTAIN on PostgreSQL 17+): its dead rows are left to autovacuum`);
      return;
    }
    // What our last vacuum left (rows a long transaction still held) is not counted as died
    // since, but only until another vacuum (autovacuum's) had its go at them: the count it
    // left holds them and the ones that died after. Fewer than it left: pruning removed some.
    if (state.vacuums !== this.vacuumsByLast) this.leftByLast = 0;
    this.leftByLast = Math.min(this.leftByLast, state.dead_rows);
    const died = state.dead_rows - this.leftByLast;
    if (died < Math.max(MIN_DEAD_ROWS, MIN_DEAD_SHARE * state.live_rows)) return;
    this.running = this.vacuum().finally(() => {
      this.running = undefined;
    });
  }

  /** Waits for the running vacuum, if any (tests, runOnce()). */
  async idle(): Promise<void> {
    await this.running;
  }

  /**
   * At shutdown: closes the vacuum's connection at once. The server finishes the vacuum
   * (whatever it got done stays done) and then finds the connection gone.
   */
  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined; // so that the vacuum's failure from this end is not reported
    // pg never settles the connect() of a client ended while it connects (nor would this wait):
    // such a client is ended by vacuum() once connected, which sees it was stopped.
    if (!this.connecting) await client?.end().catch(() => undefined);
    await this.running;
  }

  private async vacuum(): Promise<void> {
    // The pool's own connection settings (pg's Pool makes each of its clients from them), or
    // listenUrl's through a transaction-mode pooler. The Pool keeps the password (a string or a
    // function) as a property of them that a spread does not copy (it hides it from logs): it
    // is copied by name. Through the pooler (no listenUrl) the vacuum goes there, with no session SET.
    const direct = this.db.directConnectionConfig() as ClientConfig | undefined;
    const options = direct ?? (this.db.pool.options as ClientConfig);
    // Timeouts the app set for its own queries do not apply: a long vacuum cut short would only start over.
    const client = new Client({ ...options, password: options.password, application_name: VACUUM_APPLICATION_NAME, statement_timeout: undefined, query_timeout: undefined });
    client.on('error', () => undefined); // a connection lost mid-vacuum: the query below fails with it
    this.client = client;
    try {
      this.connecting = true;
      try {
        await client.connect();
      } finally {
        this.connecting = false;
      }
      if (this.client !== client) return; // stopped while connecting
      // nor what the server or the role set (a SET through a transaction-mode pooler would stay on its server connection, for others)
      if (direct) await client.query(`set statement_timeout = 0; set lock_timeout = 0`);
      await client.query(`vacuum (skip_locked) ${quoteIdentifier(this.schema)}.jobs`);
      const [state] = await this.db.runOn<VacuumState>(client, 'jobsVacuumState', []);
      this.leftByLast = state.dead_rows;
      this.vacuumsByLast = state.vacuums;
    } catch (error) {
      if (this.client === client) this.events.reportError(this.pinned.workerId, 'maintenance', error);
    } finally {
      if (this.client === client) this.client = undefined;
      await client.end().catch(() => undefined);
    }
  }
}
