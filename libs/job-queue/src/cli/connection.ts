import type { Pool, QueryResultRow } from 'pg';
import { DataSource } from 'typeorm';
import { JobQueueError } from '../core/errors';
import { validateSchemaName } from '../core/schema-name';
import type { Statement } from '../db/job-queue-database';
import { goesThroughTransactionPooler, transactionPoolerFound } from '../db/pooler-check';
import { quoteIdentifier } from '../sql/identifier';
import { createQueries, type JobQueueQueries } from '../sql/queries';
import { toConnectFailure } from './failures';

/** The options every command that talks to PostgreSQL takes (program.ts). */
export interface ConnectionOptions {
  databaseUrl?: string;
  schema: string;
  /** Seconds to wait for the server to accept the connection. */
  connectTimeout: string;
  /** `--transaction-pooling`: the URL goes through a pooler in transaction mode (or JOB_QUEUE_TRANSACTION_POOLING, see transactionPoolingOf). */
  transactionPooling?: boolean;
}

/** The environment variable that says what `--transaction-pooling` says, for pipelines that set DATABASE_URL. */
export const TRANSACTION_POOLING_ENV = 'JOB_QUEUE_TRANSACTION_POOLING';

/**
 * Whether the connection goes through a transaction-mode pooler: the flag, else the
 * environment variable, `1`/`true` or `0`/`false`/empty (not commander's `.env()`, for which
 * any value, `0` too, turns a flag on).
 */
export function transactionPoolingOf(options: Pick<ConnectionOptions, 'transactionPooling'>, env: NodeJS.ProcessEnv = process.env): boolean {
  if (options.transactionPooling) return true;
  const value = (env[TRANSACTION_POOLING_ENV] ?? '').trim().toLowerCase();
  if (value === '1' || value === 'true') return true;
  if (value === '' || value === '0' || value === 'false') return false;
  throw new JobQueueError('JQ_BAD_USAGE', `${TRANSACTION_POOLING_ENV} must be 1, true, 0 or false, got ${JSON.stringify(env[TRANSACTION_POOLING_ENV])}`);
}

/**
 * The bin's hold on PostgreSQL: a TypeORM DataSource (the migrations run on its QueryRunner,
 * as the module's do) and the package's statements (sql/queries.ts) run on its pg pool, as
 * JobQueueDatabase runs them. No Nest application.
 */
export interface CliConnection {
  readonly dataSource: DataSource;
  readonly schema: string;
  readonly sql: JobQueueQueries;
  /** host:port/database, without user or password: what messages name. */
  readonly target: string;
  /**
   * `--transaction-pooling`: the URL goes through a pooler in transaction mode. Every command
   * runs its statements unnamed (never prepared by name) and sets nothing for the session
   * either way; this changes how `migrate` runs (migrate-command.ts).
   */
  readonly transactionPooling: boolean;
  /** One statement of sql/queries.ts. */
  run<Row extends QueryResultRow>(statement: Statement, values: unknown[]): Promise<Row[]>;
  /** Any SQL text. */
  query<Row extends QueryResultRow>(text: string, values?: unknown[]): Promise<Row[]>;
}

/** Checks `--database-url` (or DATABASE_URL) before any connection: a postgres:// URL. Returns it and what messages may show of it. */
export function parseDatabaseUrl(text: string | undefined): { url: string; target: string } {
  if (text === undefined || text.trim() === '') {
    throw new JobQueueError('JQ_BAD_DATABASE_URL', 'no database URL: pass --database-url postgres://user:password@host:5432/database or set DATABASE_URL');
  }
  let url: URL;
  try {
    url = new URL(text.trim());
  } catch {
    // not echoed: a string that is no URL may still hold a password
    throw new JobQueueError('JQ_BAD_DATABASE_URL', 'the database URL is not a URL: expected postgres://user:password@host:5432/database');
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new JobQueueError('JQ_BAD_DATABASE_URL', `the database URL must start with postgres:// or postgresql://, got ${url.protocol}//…`);
  }
  const database = decodeURIComponent(url.pathname.replace(/^\//, ''));
  const host = url.hostname || url.searchParams.get('host') || 'localhost';
  return { url: text.trim(), target: `${host}:${url.port || '5432'}${database ? `/${database}` : ''}` };
}

/** Opens a connection (fails with JQ_BAD_DATABASE_URL, JQ_INVALID_SCHEMA, JQ_DB_UNREACHABLE or JQ_DB_LOGIN_FAILED), runs `work`, closes it. */
export async function withConnection<T>(options: ConnectionOptions, work: (connection: CliConnection) => Promise<T>): Promise<T> {
  const schema = validateSchemaName(options.schema);
  const { url, target } = parseDatabaseUrl(options.databaseUrl);
  const transactionPooling = transactionPoolingOf(options);
  const seconds = Number(options.connectTimeout);
  if (!Number.isFinite(seconds) || seconds <= 0) throw new JobQueueError('JQ_BAD_USAGE', `--connect-timeout must be a number of seconds above 0, got ${JSON.stringify(options.connectTimeout)}`);
  const dataSource = new DataSource({
    type: 'postgres',
    url,
    applicationName: 'nestjs-job-queue cli',
    connectTimeoutMS: Math.round(seconds * 1000),
    // one connection for the migrations' QueryRunner, one for the index-build watchdog beside it (migrations/ledger.ts)
    extra: { max: 2 },
    // an idle connection the server ends is the next statement's error, not a warning on the console
    poolErrorHandler: () => undefined,
    logging: false,
    entities: [],
  });
  const started = Date.now();
  try {
    await dataSource.initialize();
  } catch (error) {
    // pg ends a connection that timed out, and says only that it was terminated
    if (Date.now() - started >= seconds * 1000 - 50 && /terminated|timeout/i.test(String((error as Error)?.message))) {
      throw new JobQueueError('JQ_DB_UNREACHABLE', `no answer from PostgreSQL at ${target} within ${seconds} s (--connect-timeout): is the host right, and the port open to this machine?`);
    }
    throw toConnectFailure(error, target);
  }
  try {
    const pool = (dataSource.driver as unknown as { master: Pool }).master;
    const sql = createQueries(schema);
    // unnamed statements (no `name`): nothing is left prepared on a server connection, which behind a transaction-mode pooler another client gets next
    const query = async <Row extends QueryResultRow>(text: string, values: unknown[] = []) => (await pool.query<Row>(text, values)).rows;
    return await work({
      dataSource,
      schema,
      sql,
      target,
      transactionPooling,
      query,
      run: (statement, values) => query(sql[statement], values),
    });
  } finally {
    await dataSource.destroy().catch(() => undefined);
  }
}

/** What the refusal of a transaction-mode pooler tells the bin's user to do. */
const POOLER_FIX =
  'migrate would take its session advisory lock and build indexes concurrently there, where neither holds from one transaction to the next. ' +
  'Pass --transaction-pooling (or set JOB_QUEUE_TRANSACTION_POOLING=1): each migration then runs in one transaction under a transaction-scoped lock, ' +
  'its indexes built plainly; or point --database-url at PostgreSQL directly';

/**
 * Fails with JQ_TRANSACTION_POOLER when the connection goes through a pooler in transaction
 * mode that `--transaction-pooling` did not declare: the module's check at startup
 * (db/pooler-check.ts), with the bin's own advice.
 */
export async function refuseUndeclaredPooler(connection: CliConnection): Promise<void> {
  if (connection.transactionPooling) return;
  const pool = (connection.dataSource.driver as unknown as { master: Pool }).master;
  if (await goesThroughTransactionPooler(pool)) throw transactionPoolerFound(POOLER_FIX, `the connections to ${connection.target}`);
}

/** Fails with JQ_SCHEMA_MISSING unless the schema has its jobs table: for the commands that read or change jobs. */
export async function requireJobTables(connection: CliConnection): Promise<void> {
  const [{ found }] = await connection.query<{ found: boolean }>('select to_regclass($1) is not null as found', [`${quoteIdentifier(connection.schema)}.jobs`]);
  if (!found) {
    throw new JobQueueError('JQ_SCHEMA_MISSING', `schema "${connection.schema}" has no job tables in ${connection.target}: run \`nestjs-job-queue migrate\` (or start the app once), or pass the right --schema`);
  }
}
