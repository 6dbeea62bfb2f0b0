import type { Pool, PoolClient, QueryResult, QueryResultRow } from 'pg';
import { onBorrowedConnection } from '../db/borrowed-connection';
import { isResultTypeChanged, sendInOneMessage } from '../db/sql-prepared';
import { QUEUE_OWN_CONNECTIONS } from '../db/pool-size';

/**
 * The settings claims run with (the bench's SQL-limit line uses them too, as part of the claim):
 * - `synchronous_commit = off`: a claim does not wait for the disk. A server crash (or a
 *   failover) within a moment of it can lose it: its jobs are then offered again although
 *   their handlers started (see docs/guarantees.md, delivery guarantees). Releases, adds and the
 *   app's own transactions are not affected, and any later durable commit (the release that
 *   follows) makes the claim durable too.
 * - no bitmap scans, sorts, incremental sorts or sequential scans: the claim walks the fetch
 *   indexes (jobs_fetch_unqueued_idx, jobs_fetch_queued_idx) in order and stops at its limit,
 *   probes each queue's head by jobs_queue_order_idx (with incremental sorts on, it served a
 *   head lookup from jobs_fetch_queued_idx, every queued job per head, when the statistics
 *   were taken before any queued job), and reaches the heads it locks, and the rows it
 *   updates, by id. On a table without statistics (just filled), the planner otherwise guesses that few
 *   rows match and reads and sorts every due job at each claim; on statistics that say the
 *   table is empty (a vacuum after a drain) it reads the whole table to find 100 ids. Its few
 *   small sorts, of rows already found, stay: they have no alternative.
 * - one generic plan, made at the first claim (a rate-limited claim's before it: oneMessage) and
 *   kept: planning the claim took 1.1 ms, as long as running it. The settings above fix its
 *   shape whatever the parameters, and test/worker/claim-plan.test.ts checks the generic plan
 *   on fresh and on "empty" statistics.
 * - no JIT: on a large table without statistics the claim's estimated cost is high enough to
 *   JIT-compile it at each execution, which costs more than the claim itself (0.5–1 s).
 */
const CLAIM_SETTINGS = { synchronous_commit: 'off', enable_bitmapscan: 'off', enable_sort: 'off', enable_incremental_sort: 'off', enable_seqscan: 'off', jit: 'off', plan_cache_mode: 'force_generic_plan' };
export const CLAIM_SESSION_SETTINGS = Object.entries(CLAIM_SETTINGS).map(([name, value]) => `set ${name} = ${value}`).join('; ');
/**
 * How claims' transactions begin: READ COMMITTED whatever the server's default, since a limited
 * claim (worker/limited-claim.ts) counts after waiting for a lock, and at a stricter level its
 * count would see the snapshot taken before the wait.
 */
const BEGIN = 'begin isolation level read committed';
const CLAIM_LOCAL_SETTINGS = Object.entries(CLAIM_SETTINGS).map(([name, value]) => `set local ${name} = ${value}`).join('; ');
/** A claim's begin where the session has not the settings: with them local to its transaction. */
const LOCAL_BEGIN = `${BEGIN}; ${CLAIM_LOCAL_SETTINGS}`;

/** A claim in one message (ClaimConnection.oneMessage): its statements, and what the connection needs first (db/sql-prepared.ts MessageStatement). */
export interface ClaimMessage {
  preparation?: string;
  statements: string[];
}

/** The application_name of a worker's claim connection, as pg_stat_activity shows it: with the process id. */
export const CLAIMS_APPLICATION_NAME = `nestjs-job-queue claims ${process.pid}`;

/**
 * Runs the worker's claims with CLAIM_SETTINGS. On a pool with room for it, one connection is
 * taken on first use and kept, with the settings for its session: claims never wait behind
 * handlers for a connection, and keep their prepared statement. A failed claim destroys it
 * (it may be broken); the next claim takes another. On a smaller pool nothing is kept: each
 * claim takes a connection for a transaction of its own, with the settings for it alone.
 *
 * Through a transaction-mode pooler (`pooled`) a session setting would stay on whichever
 * server connection ran the SET, for other clients, and be missing from the one the next
 * claim gets: the kept connection then runs each claim in a transaction of its own with the
 * settings made local to it (two more round trips a claim), and sets nothing for its session.
 */
export class ClaimConnection {
  private client?: Promise<PoolClient>;

  constructor(
    /** The DataSource's, once it is initialised. */
    private readonly pool: () => Pool,
    /** transactionPooling: no session settings. */
    private readonly pooled = false,
  ) {}

  /** Runs `claim` (one statement) on a connection with the claim settings. */
  run<Row>(claim: (client: PoolClient) => Promise<Row[]>): Promise<Row[]> {
    return this.onConnection((client, begin) => (begin === BEGIN ? claim(client) : this.transactionOn(client, begin, '', claim)));
  }

  /**
   * Runs `claim` (several statements: a limited task's claim, worker/limited-claim.ts) in one
   * transaction on a connection with the claim settings. `opening` (one statement without
   * parameters: the task's lock) is sent with the begin, in the same round trip, and `claim`
   * gets its rows.
   */
  transaction<Row, Opened extends QueryResultRow>(opening: string, claim: (client: PoolClient, opened: Opened[]) => Promise<Row[]>): Promise<Row[]> {
    return this.onConnection((client, begin) => this.transactionOn(client, begin, opening, claim));
  }

  /**
   * Runs `message`'s statements (without parameters: JobQueueDatabase.inMessage) in one
   * transaction sent as one message, on a connection with the claim settings: begin, the
   * statements, commit, in one round trip, each statement with a snapshot of its own. Returns
   * the last statement's rows. A limited task's claim holds the task's lock from the statement
   * that takes it to the commit: in one message that is the server's time alone, not the round
   * trips between. What the connection must have first (`preparation`: a statement's PREPARE
   * and its planning, once per connection) goes before, in a transaction of its own: a
   * rate-limited claim's first EXECUTE planned it (15 ms on a quiet server, 50–100 ms as
   * workers start together) under the task's lock, every process's claims of the task waiting,
   * and after the begin whose time it records as its jobs' start. A statement prepared before a
   * migration changed what it returns fails: its connection is destroyed, and the message goes
   * once more on another (the kept connection's successor prepares it anew; on a small pool
   * another connection that prepared it may fail too, and is destroyed in turn).
   */
  async oneMessage<Row extends QueryResultRow>(message: (client: PoolClient) => ClaimMessage): Promise<Row[]> {
    const send = () =>
      this.onConnection((client, begin) => sendInOneMessage<Row>(client, begin, message(client)));
    return send().catch((error: unknown) => (isResultTypeChanged(error) ? send() : Promise.reject(error)));
  }

  /**
   * Runs `work` on the kept connection, or on a small pool on one of its own, given the begin of
   * a transaction there: BEGIN where the session has the claim settings, else with them local to
   * the transaction (a small pool, a pooler). A failure destroys the connection, which may still
   * be in a transaction.
   */
  private async onConnection<T>(work: (client: PoolClient, begin: string) => Promise<T>): Promise<T> {
    if (this.pool().options.max <= QUEUE_OWN_CONNECTIONS) return onBorrowedConnection(this.pool(), (client) => work(client, LOCAL_BEGIN));
    const client = await this.kept();
    try {
      return await work(client, this.pooled ? LOCAL_BEGIN : BEGIN);
    } catch (error) {
      this.drop(client, error);
      throw error;
    }
  }

  /** The claim in a transaction begun by `begin`, `opening` sent with it (none: ''). */
  private async transactionOn<Row, Opened extends QueryResultRow>(
    client: PoolClient,
    begin: string,
    opening: string,
    claim: (client: PoolClient, opened: Opened[]) => Promise<Row[]>,
  ): Promise<Row[]> {
    // Several statements without parameters go in one message (the simple query protocol), each answered in turn.
    const results = (await client.query(opening ? `${begin}; ${opening}` : begin)) as unknown as QueryResult<Opened> | Array<QueryResult<Opened>>;
    const rows = await claim(client, opening && Array.isArray(results) ? results[results.length - 1].rows : []);
    await client.query('commit');
    return rows;
  }

  private kept(): Promise<PoolClient> {
    this.client ??= this.connect().catch((error: unknown) => {
      this.client = undefined;
      throw error;
    });
    return this.client;
  }

  private async connect(): Promise<PoolClient> {
    const client = await this.pool().connect();
    // A connection that dies between claims is dropped: the next claim takes another.
    client.on('error', (error) => this.drop(client, error));
    try {
      if (!this.pooled) await client.query(`${CLAIM_SESSION_SETTINGS}; set application_name = '${CLAIMS_APPLICATION_NAME}'`);
    } catch (error) {
      this.destroy(client, error);
      throw error;
    }
    this.current = client;
    return client;
  }

  /** The kept connection once connected: a drop of any other (an older one) does nothing. */
  private current?: PoolClient;

  private drop(client: PoolClient, error: unknown): void {
    if (this.current !== client) return;
    this.current = undefined;
    this.client = undefined;
    this.destroy(client, error);
  }

  private destroy(client: PoolClient, error: unknown): void {
    client.removeAllListeners('error');
    client.on('error', () => {}); // a dead connection may still emit
    client.release(error instanceof Error ? error : true);
  }

  /**
   * The worker stops: the kept connection is closed rather than given back with its settings
   * (resetting them could wait on a connection that is half gone); the pool opens another
   * when it needs one.
   */
  async close(): Promise<void> {
    const client = await this.client?.catch(() => undefined);
    if (client) this.drop(client, true);
  }
}
