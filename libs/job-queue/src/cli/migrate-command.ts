import type { Command } from 'commander';
import type { DataSource } from 'typeorm';
import { JobQueueError } from '../core/errors';
import { migrateBesidePooler } from '../db/pooled-migrations';
import { runJobQueueMigrations } from '../db/run-migrations';
import { refuseUndeclaredPooler, withConnection, type CliConnection, type ConnectionOptions } from './connection';
import { EXIT, type SetExitCode } from './exit-codes';
import { toFailure } from './failures';
import { readMigrationPlan, type KnownMigration, type MigrationPlan } from './migration-plan';
import { printJson, printLine, printNote } from './output';
import { isRead, ledgerInsertOf, toScript, type RecordedStatement } from './recorded-sql';
import { recordingQueries, recordMigration, runsOutsideTransaction } from './recording-runner';

interface MigrateOptions {
  dryRun?: boolean;
  showSql?: boolean;
  json?: boolean;
}

/** What became of a pending migration. */
interface Outcome {
  name: string;
  /** `applied` by this run, or found applied meanwhile by another runner (an app starting, another migrate). */
  outcome: 'applied' | 'applied-by-another-runner';
  ms: number;
  sql?: string[];
}

export function registerMigrate(program: Command, setExitCode: SetExitCode): void {
  program
    .command('migrate')
    .description('apply the pending migrations, one at a time, under the ledger and advisory lock the module uses (safe while apps migrate too)')
    .option('--dry-run', 'list the pending migrations and apply nothing')
    .option('--show-sql', "print each migration's SQL: as it runs, or with --dry-run as it would run")
    .option('--json', 'print one JSON document')
    .action(async (options: MigrateOptions, command: Command) => {
      setExitCode(await withConnection(command.optsWithGlobals<ConnectionOptions>(), (connection) => migrate(connection, options)));
    });
}

async function migrate(connection: CliConnection, options: MigrateOptions): Promise<number> {
  // before anything is read or written: through a transaction-mode pooler the session lock could hang or be left behind
  await refuseUndeclaredPooler(connection);
  const plan = await readMigrationPlan(connection);
  if (plan.unknown.length > 0) {
    printNote(`note: the ledger of schema "${connection.schema}" lists migrations this version does not know (a newer version applied them): ${plan.unknown.join(', ')}`);
  }
  if (options.dryRun) return dryRun(connection, plan, options);
  const text = !options.json;
  const sqlText = text && options.showSql;
  // with --show-sql the text is an SQL script: everything else in it is a comment
  const say = (line: string) => text && printLine(sqlText ? `-- ${line}` : line);
  if (plan.pending.length === 0) say(`Schema "${connection.schema}" is current: no migration pending (${plan.known.length} applied).`);
  const outcomes: Outcome[] = [];
  for (const migration of plan.pending) {
    if (sqlText) printLine(`-- ${migration.name}`);
    outcomes.push(await apply(connection, migration, (statement) => sqlText && printLine(toScript(statement))));
    const { outcome, ms } = outcomes[outcomes.length - 1];
    say(outcome === 'applied' ? `Applied ${migration.name} (${ms} ms)` : `${migration.name}: already applied meanwhile by another runner`);
  }
  if (options.json) {
    printJson({ schema: connection.schema, migrations: plan.known.length, pending: plan.pending.length, outcomes: outcomes.map((o) => (options.showSql ? o : { ...o, sql: undefined })) });
  } else if (plan.pending.length > 0) {
    const mine = outcomes.filter((o) => o.outcome === 'applied').length;
    say(`Schema "${connection.schema}" is current: ${mine} migration${mine === 1 ? '' : 's'} applied by this run, ${outcomes.length - mine} by another runner meanwhile.`);
  }
  return EXIT.ok;
}

/**
 * Applies one migration with the module's own runner (db/run-migrations.ts: the advisory lock,
 * the ledger, a transaction or none), on a QueryRunner that tells what it sends; whether this
 * run applied it is whether the ledger's insert was among the statements. With
 * `--transaction-pooling`, as the module migrates through a pooler without listenUrl
 * (db/pooled-migrations.ts): in one transaction under the transaction-scoped lock.
 */
async function apply(connection: CliConnection, migration: KnownMigration, show: (statement: RecordedStatement) => void): Promise<Outcome> {
  const statements: RecordedStatement[] = [];
  const recording = {
    createQueryRunner: () =>
      recordingQueries(connection.dataSource.createQueryRunner(), (statement) => {
        statements.push(statement);
        if (!isRead(statement.sql)) show(statement);
      }),
  } as unknown as DataSource;
  const started = Date.now();
  try {
    if (connection.transactionPooling) await migrateBesidePooler(recording, connection.schema, [migration.Migration], undefined);
    else await runJobQueueMigrations(recording, connection.schema, [migration.Migration]);
  } catch (error) {
    const failure = toFailure(error, connection.target);
    // the server gone or the login refused is that, whatever ran; anything else is this migration's failure
    if (failure.code === 'JQ_DB_UNREACHABLE' || failure.code === 'JQ_DB_LOGIN_FAILED') throw new JobQueueError(failure.code, failure.message);
    const left = outsideTransaction(connection, migration.Migration)
      ? 'the steps it finished stay (each is safe to run again): run migrate again once the cause is fixed'
      : 'its transaction was rolled back';
    throw new JobQueueError('JQ_MIGRATION_FAILED', `${migration.name} failed: ${failure.message}; ${left}`);
  }
  const applied = statements.some((statement) => ledgerInsertOf(statement) === migration.name);
  return {
    name: migration.name,
    outcome: applied ? 'applied' : 'applied-by-another-runner',
    ms: Date.now() - started,
    sql: statements.filter((s) => !isRead(s.sql)).map(toScript),
  };
}

/** The pending migrations and, with --show-sql, the SQL each would run (recorded, nothing sent), as the module's runner would call it. */
async function dryRun(connection: CliConnection, plan: MigrationPlan, options: MigrateOptions): Promise<number> {
  const pending = await Promise.all(
    plan.pending.map(async ({ name, Migration }) => {
      const outside = outsideTransaction(connection, Migration);
      const sql = options.showSql ? (await recordMigration(Migration, { inTransaction: !outside })).filter((s) => !isRead(s.sql)).map(toScript) : undefined;
      return { name, outsideTransaction: outside, sql, plainIndexes: outside !== runsOutsideTransaction(Migration) };
    }),
  );
  if (options.json) {
    printJson({ schema: connection.schema, migrations: plan.known.length, pending, unknownApplied: plan.unknown });
    return EXIT.ok;
  }
  const comment = options.showSql ? '-- ' : '';
  if (pending.length === 0) {
    printLine(`${comment}Schema "${connection.schema}" is current: no migration pending (${plan.known.length} applied).`);
    return EXIT.ok;
  }
  printLine(`${comment}Schema "${connection.schema}": ${pending.length} of ${plan.known.length} migrations pending${plan.schemaExists ? '' : ' (the schema does not exist yet)'}; nothing applied (--dry-run).`);
  for (const { name, outsideTransaction, sql, plainIndexes } of pending) {
    const how = outsideTransaction
      ? 'outside a transaction, each step on its own; indexes built concurrently'
      : `in one transaction${plainIndexes ? '; indexes built plainly, blocking writes to their table while they build (--transaction-pooling)' : ''}`;
    printLine(options.showSql ? `\n-- ${name} (${how})` : `  ${name} (${how})`);
    if (!sql) continue;
    if (!outsideTransaction) printLine('begin;');
    for (const statement of sql) printLine(statement);
    if (!outsideTransaction) printLine('commit;');
  }
  return EXIT.ok;
}

/** Whether this run applies `Migration` outside a transaction: as the module does, but never with --transaction-pooling. */
function outsideTransaction(connection: CliConnection, Migration: KnownMigration['Migration']): boolean {
  return !connection.transactionPooling && runsOutsideTransaction(Migration);
}
