import type { Command } from 'commander';
import { JobQueueError } from '../core/errors';
import { validateSchemaName } from '../core/schema-name';
import { EXIT, type SetExitCode } from './exit-codes';
import { knownMigrations } from './migration-plan';
import { printLine } from './output';
import { packageVersion } from './package-version';
import { isRead, toScript } from './recorded-sql';
import { recordMigration } from './recording-runner';

export function registerExportSql(program: Command, setExitCode: SetExitCode): void {
  program
    .command('export-sql')
    .argument('[migrations...]', 'only these migrations, by name (default: all)')
    .description('print the migrations as plain SQL for an empty schema (for Flyway, Atlas, sqitch, psql); connects to nothing')
    .action(async (names: string[], _options: unknown, command: Command) => {
      await exportSql(validateSchemaName(command.optsWithGlobals<{ schema: string }>().schema), names);
      setExitCode(EXIT.ok);
    });
}

/**
 * Each migration's statements as the recording runner saw them on an empty schema, in one
 * transaction (indexes built plainly: on an empty table that costs nothing), with its ledger
 * row: the module and `migrate` then find it applied and leave it alone. Reads (the ledger's
 * check, the advisory lock) are left out.
 */
async function exportSql(schema: string, names: string[]): Promise<void> {
  const known = knownMigrations(schema);
  const unknown = names.filter((name) => !known.some((m) => m.name === name));
  if (unknown.length > 0) {
    throw new JobQueueError('JQ_BAD_USAGE', `no migration named ${unknown.join(', ')}: this version has ${known.map((m) => m.name).join(', ')}`);
  }
  const chosen = names.length === 0 ? known : known.filter((m) => names.includes(m.name));
  printLine(`-- nestjs-job-queue ${packageVersion()}: ${chosen.length} migration${chosen.length === 1 ? '' : 's'} of schema "${schema}" as plain SQL, for an empty schema.`);
  printLine(`-- Each creates the schema and its ledger ("${schema}".migrations) if need be and ends with its row there, so that`);
  printLine('-- the module (migrationsRun) and `nestjs-job-queue migrate` find it applied. Run each migration in one transaction');
  printLine('-- (psql --single-transaction -f …; Flyway and sqitch do). Its functions notify on channels named after the schema.');
  for (const { name, Migration } of chosen) {
    printLine();
    printLine(`-- ${name}`);
    for (const statement of await recordMigration(Migration, { inTransaction: true })) {
      if (!isRead(statement.sql)) printLine(toScript(statement));
    }
  }
}
