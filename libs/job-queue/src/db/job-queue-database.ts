import { Inject, Injectable, Logger, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { ClientBase, Pool, PoolConfig, QueryResultRow } from 'pg';
import { DataSource, type EntityManager } from 'typeorm';
import { createJobQueueMigrations } from './migrations';
import { createJobQueueEntities, JobQueueEntities } from '../entities/job-queue-entities';
import { JobQueueError } from '../core/errors';
import { runJobQueueMigrations } from './run-migrations';
import { createQueries, type JobQueueQueries } from '../sql/queries';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { onBorrowedConnection } from './borrowed-connection';
import { sendAfterCommit, type AfterCommit } from './after-commit';
import { DirectPool } from './direct-pool';
import { inlineParameters, type InlineValue } from './inline-parameters';
import { executePrepared, isResultTypeChanged, sendInOneMessage, type MessageStatement } from './sql-prepared';
import { migrateBesidePooler } from './pooled-migrations';
import { goesThroughTransactionPooler, listenUrlThroughPooler, preparedStatementClash, transactionPoolerFound } from './pooler-check';

/**
 * How runGenericPlan's transactions begin: the generic plan for their EXECUTE, made without
 * sequential scans. That plan lasts as long as its connection, or until the table's next ANALYZE
 * or VACUUM: made while `jobs` held a few rows, the release's scanned the whole table eight times
 * once it held 60,000 (74 ms a flush, against 1.6; test/worker/release-plan.test.ts).
 * And without JIT, as the claim connection: a plan made for any value can be costed as if it
 * read whole tables, and PostgreSQL then compiles it at each run. The flow functions a release's
 * trigger runs did, under statistics from one fan-out: 156 ms of compiling in a release that
 * failed one job of a 2,000-wide flow (test/worker/settle-plan.test.ts).
 */
export const GENERIC_BEGIN = 'begin; set local plan_cache_mode = force_generic_plan; set local enable_seqscan = off; set local jit = off';

/**
 * Statements planned at each run, never kept prepared: rare ones (a heartbeat, a pause's
 * give-back) whose generic plan, once PostgreSQL chose it after a few runs, kept what the table's
 * statistics said then. Made on a few rows, it scanned all of `jobs` once a backlog came (8–10 ms a
 * heartbeat, 11–45 ms a give-back beside 60,000 jobs, until the next ANALYZE); planned each time,
 * 0.7 and 1.2–2.0 ms (docs/maintainers.md, "Generic plans outlive the statistics they were made on").
 */
export const PLANNED_AT_EACH_RUN: ReadonlySet<Statement> = new Set<Statement>(['heartbeatWorker', 'giveBackJobsById']);

/** A statement's twin without its NOTIFY (`quiet`), and the NOTIFY to send after its commit instead (sql/notify-after.ts). */
export interface NotifyAfterCommit {
  quiet: Statement;
  statements: readonly string[];
}

/** The name of a statement of sql/queries.ts. */
export type Statement = Exclude<keyof JobQueueQueries, 'channel' | 'jobsTable' | 'finishedChannel' | 'cancelChannel' | 'eventsChannel' | 'lockTaskLimitOf'>;

/**
 * The module's hold on PostgreSQL: finds the DataSource, applies the migrations at
 * startup, and runs the statements of sql/queries.ts on the DataSource's pg pool (or on a
 * caller's transaction).
 */
@Injectable()
export class JobQueueDatabase implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger('JobQueue');
  readonly sql: JobQueueQueries;
  private source?: DataSource;
  private ownsSource = false;
  /** Part of every prepared statement's name: bumped when the schema changed a statement's result (see run). */
  private generation = 0;
  /** With transactionPooling and listenUrl: the connections that reach PostgreSQL directly. */
  private readonly direct?: DirectPool;

  constructor(
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
    private readonly moduleRef: ModuleRef,
  ) {
    this.sql = createQueries(options.schema);
    if (options.listenUrl) this.direct = new DirectPool(options.listenUrl, () => this.pool.options);
  }

  async onModuleInit(): Promise<void> {
    const source = this.findDataSource();
    if (!source.isInitialized) await source.initialize();
    this.source = source;
    await this.checkPooler();
    if (this.options.migrationsRun) {
      const { schema } = this.options;
      const migrations = createJobQueueMigrations(schema);
      const applied = this.options.transactionPooling
        ? await migrateBesidePooler(source, schema, migrations, this.direct?.config())
        : await runJobQueueMigrations(source, schema, migrations);
      if (applied.length > 0) this.logger.log(`Applied migrations to schema "${schema}": ${applied.join(', ')}`);
    }
  }

  async onApplicationShutdown(): Promise<void> {
    await this.direct?.end();
    if (this.ownsSource && this.source?.isInitialized) await this.source.destroy();
  }

  /**
   * Without transactionPooling, refuses a DataSource that goes through a transaction-mode
   * pooler (JQ_TRANSACTION_POOLER), before anything relies on a session; with it, a listenUrl
   * that does.
   */
  private async checkPooler(): Promise<void> {
    if (!this.options.transactionPooling) {
      if (await goesThroughTransactionPooler(this.pool)) throw transactionPoolerFound();
    } else if (this.direct && (await goesThroughTransactionPooler(this.direct.get()))) {
      throw listenUrlThroughPooler();
    }
  }

  /**
   * Where LISTEN can run: the DataSource's pool, or with transactionPooling the direct
   * connections of listenUrl; undefined with transactionPooling and no listenUrl (then
   * workers and waiters poll).
   */
  get listenPool(): Pool | undefined {
    if (!this.options.transactionPooling) return this.pool;
    return this.direct?.get();
  }

  /** Whether LISTEN can run at all (listenPool is not undefined), known before the DataSource is. */
  get canListen(): boolean {
    return !this.options.transactionPooling || this.direct !== undefined;
  }

  /** Options for a direct connection of one's own (the vacuum): listenUrl's, or the pool's own when there is no pooler. Undefined through a pooler without listenUrl. */
  directConnectionConfig(): PoolConfig | undefined {
    if (!this.options.transactionPooling) return this.pool.options;
    return this.direct?.config();
  }

  get dataSource(): DataSource {
    if (!this.source) throw new JobQueueError('JQ_NO_DATA_SOURCE', 'the job queue is not initialised yet (onModuleInit has not run)');
    return this.source;
  }

  /** The pg pool under the DataSource: the hot path goes straight to it. */
  get pool(): Pool {
    return (this.dataSource.driver as unknown as { master: Pool }).master;
  }

  /**
   * Runs one statement of sql/queries.ts: on the caller's transaction when given its
   * manager, otherwise on the pool as a named prepared statement, so that each connection
   * parses and plans it once rather than on every job.
   */
  async run<Row extends QueryResultRow>(statement: Statement, values: unknown[], manager?: EntityManager): Promise<Row[]> {
    if (manager) return manager.query(this.sql[statement], values);
    return this.runOn(this.pool, statement, values);
  }

  /**
   * Runs one statement unprepared, planned for its values each time: for statements whose
   * best plan depends on them (a list of one task among a million finished jobs), where a
   * prepared statement's generic plan would walk the wrong index.
   */
  async runPlannedEachTime<Row extends QueryResultRow>(statement: Statement, values: unknown[]): Promise<Row[]> {
    return (await this.pool.query<Row>(this.sql[statement], values)).rows;
  }

  /**
   * Statement `statement` with `values` (of SQL `types`), as a statement to send in a message of
   * several, which takes no parameters (worker/claim-connection.ts oneMessage): an EXECUTE of it
   * prepared on `client` by SQL PREPARE, its PREPARE and planning sent first, once per
   * connection (db/sql-prepared.ts; its plan kept as runOn keeps one); through a transaction-mode
   * pooler, which keeps no SQL PREPARE from one transaction to the next whatever
   * `preparedStatements` says, its text with the values written in.
   */
  inMessage(client: ClientBase, statement: Statement, types: readonly string[], values: readonly InlineValue[]): MessageStatement {
    if (this.options.transactionPooling && !this.direct?.has(client)) return { statement: inlineParameters(this.sql[statement], values) };
    return executePrepared(client, this.options.schema, statement, this.sql[statement], types, values);
  }

  /**
   * Runs one statement as a named prepared statement on a connection of one's own (the
   * worker's pinned one) or the pool; unprepared through a transaction-mode pooler (a server
   * connection there may never have seen the statement), unless `preparedStatements` says
   * the pooler keeps them, or the connection is a direct one (listenUrl). PLANNED_AT_EACH_RUN's
   * statements always go unprepared.
   */
  async runOn<Row extends QueryResultRow>(client: Pool | ClientBase, statement: Statement, values: unknown[]): Promise<Row[]> {
    if ((!this.options.preparedStatements && !this.direct?.has(client)) || PLANNED_AT_EACH_RUN.has(statement)) {
      return (await client.query<Row>(this.sql[statement], values)).rows;
    }
    const prepared = () =>
      client.query<Row>({ name: `jq_${this.options.schema}_${this.generation}_${statement}`, text: this.sql[statement], values });
    try {
      return (await prepared()).rows;
    } catch (error) {
      if (!isResultTypeChanged(error)) throw preparedStatementClash(error, this.options.transactionPooling) ?? error;
      // A statement prepared before a schema change whose result it changes fails on every
      // connection that prepared it, for good: prepare every statement again, under new names.
      // The failed execution did nothing, so it is safe to run it again.
      this.generation += 1;
      return (await prepared()).rows;
    }
  }

  /**
   * Runs one statement on a pool connection with its generic plan, made once per connection,
   * in one round trip: begin, `set local plan_cache_mode = force_generic_plan`, an EXECUTE of
   * it prepared by SQL PREPARE (inMessage: its values written as literals, its PREPARE and
   * planning sent first, once per connection) and commit, in one message. For a statement
   * sent again and again whose custom plan costs more to make than to run: node-pg's named
   * releaseJobs was planned anew at every small flush under a steady load (5.2 ms planning
   * where running it took 1.7). A failure destroys the connection (it may be left in a
   * transaction); a statement prepared before a migration changed its result goes once more,
   * on another connection. The values being in the statement's text, a statement that fails
   * is logged with them by the server (log_min_error_statement, `error` by default). Through
   * a transaction-mode pooler, as runOn: no SQL PREPARE lasts from one transaction to the next
   * there, and a statement written in whole would be planned at every call.
   *
   * With `after`, the message carries `after.quiet` (the statement without its NOTIFY) and,
   * past the commit, `after.statements` (the NOTIFY, sql/notify-after.ts says why); the
   * statement itself still goes through a pooler. A NOTIFY that fails there (the server's
   * notification queue full) is logged, and the call keeps its result (db/after-commit.ts):
   * its transaction committed, and workers find the jobs at their next poll.
   */
  runGenericPlan<Row extends QueryResultRow>(statement: Statement, types: readonly string[], values: readonly InlineValue[], after?: NotifyAfterCommit): Promise<Row[]> {
    return this.runInOneMessage(GENERIC_BEGIN, statement, types, values, after);
  }

  /**
   * runGenericPlan's message and `after`, for a statement whose plan the server chooses as it
   * would for node-pg's (an add's insert: with its generic plan forced, a single add took 75 µs
   * more, measured): begun by a plain `begin`. Its values are in the message's text: a statement
   * that fails is logged by the server with them (a job's payload), where node-pg's parameters
   * are not (log_parameter_max_length_on_error, 0 by default). The NOTIFY rides in the same
   * message: in a message of its own it cost the server 40–70 µs more an add (add-ab.cjs).
   */
  runThenNotify<Row extends QueryResultRow>(statement: Statement, types: readonly string[], values: readonly InlineValue[], after: NotifyAfterCommit): Promise<Row[]> {
    return this.runInOneMessage('begin', statement, types, values, after);
  }

  /**
   * runOn's statement `after.quiet` (without its NOTIFY) on a pool connection with node-pg's
   * parameters (arrays of a thousand values, which a message's text would spell out), then
   * `after.statements` in a message of their own, their failure logged as runGenericPlan's:
   * addMany without a caller's manager.
   */
  runArraysThenNotify<Row extends QueryResultRow>(statement: Statement, values: unknown[], after: NotifyAfterCommit): Promise<Row[]> {
    if (this.options.transactionPooling) return this.runOn(this.pool, statement, values);
    return onBorrowedConnection(this.pool, async (client) => {
      const rows = await this.runOn<Row>(client, after.quiet, values);
      await sendAfterCommit(client, this.afterCommit(after.statements));
      return rows;
    });
  }

  private runInOneMessage<Row extends QueryResultRow>(begin: string, statement: Statement, types: readonly string[], values: readonly InlineValue[], after?: NotifyAfterCommit): Promise<Row[]> {
    if (this.options.transactionPooling) return this.runOn(this.pool, statement, [...values]);
    const send = () =>
      onBorrowedConnection(this.pool, (client) => {
        const { preparation, statement: execute } = this.inMessage(client, after?.quiet ?? statement, types, values);
        return sendInOneMessage<Row>(client, begin, { preparation, statements: [execute], afterCommit: after && this.afterCommit(after.statements) });
      });
    return send().catch((error: unknown) => (isResultTypeChanged(error) ? send() : Promise.reject(error)));
  }

  /** `statements` to send after a commit, their failure logged (db/after-commit.ts). */
  private afterCommit(statements: readonly string[]): AfterCommit {
    return {
      statements,
      failed: (error) =>
        this.logger.warn(`a NOTIFY after a commit failed; the commit stands, workers find its jobs at their next poll, a waitForJob of a job it told waits until its timeout: ${(error as Error)?.message ?? error}`),
    };
  }

  /** In order: the given DataSource, the named or default @nestjs/typeorm one, one of our own. */
  private findDataSource(): DataSource {
    const { dataSource, dataSourceName, connection } = this.options;
    if (dataSource) {
      if (!(dataSource instanceof DataSource)) throw new JobQueueError('JQ_INVALID_OPTIONS', 'dataSource must be a TypeORM DataSource');
      return dataSource;
    }
    const fromTypeOrm = this.typeOrmDataSource(dataSourceName);
    if (fromTypeOrm) return fromTypeOrm;
    if (dataSourceName) {
      throw new JobQueueError('JQ_NO_DATA_SOURCE', `no @nestjs/typeorm DataSource named "${dataSourceName}" was found`);
    }
    if (connection) {
      this.ownsSource = true;
      const schema = this.options.schema;
      return new DataSource({
        ...connection,
        type: 'postgres',
        entities: schema === 'job_queue' ? JobQueueEntities : Object.values(createJobQueueEntities(schema)),
        synchronize: false,
        migrationsRun: false,
      });
    }
    throw new JobQueueError(
      'JQ_NO_DATA_SOURCE',
      'no DataSource: import TypeOrmModule.forRoot(), or give JobQueueModule the option dataSource, dataSourceName or connection',
    );
  }

  private typeOrmDataSource(name?: string): DataSource | undefined {
    try {
      return this.moduleRef.get<DataSource>(getDataSourceToken(name) as string, { strict: false });
    } catch {
      return undefined;
    }
  }
}
