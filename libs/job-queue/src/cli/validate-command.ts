import type { Command } from 'commander';
import { withConnection, type CliConnection, type ConnectionOptions } from './connection';
import { EXIT, type SetExitCode } from './exit-codes';
import { compareWithMigrations, type Difference } from './expected-schema';
import { readMigrationPlan } from './migration-plan';
import { printJson, printLine, printNote } from './output';
import { packageVersion } from './package-version';

export function registerValidate(program: Command, setExitCode: SetExitCode): void {
  program
    .command('validate')
    .description('exit 0 when the schema is what this version expects; 1 when migrations are pending or tables, columns, functions or indexes differ (printed)')
    .option('--json', 'print one JSON document')
    .action(async (options: { json?: boolean }, command: Command) => {
      setExitCode(await withConnection(command.optsWithGlobals<ConnectionOptions>(), (connection) => validate(connection, options)));
    });
}

/**
 * The ledger first (pending migrations, and those of a newer version), then, once nothing is
 * pending, the schema's objects against what the migrations make (expected-schema.ts): a
 * ledger that says applied is not proof (a table dropped by hand, an index whose concurrent
 * build failed). With migrations pending, objects are not compared: they would only list
 * what the pending migrations add.
 */
async function validate(connection: CliConnection, options: { json?: boolean }): Promise<number> {
  const plan = await readMigrationPlan(connection);
  const comparison = plan.pending.length === 0 ? await compareWithMigrations(connection) : undefined;
  // a newer version may drop an index this one made (migration 5 did): only a note then
  const newer = plan.unknown.length > 0;
  const all = comparison?.compared ? comparison.differences : [];
  const failing = all.filter((d) => !(newer && d.kind === 'index'));
  const current = plan.pending.length === 0 && failing.length === 0;
  const notes = [
    ...(newer ? [`the ledger lists migrations this version does not know (a newer version applied them): ${plan.unknown.join(', ')}`] : []),
    ...(comparison && !comparison.compared ? [comparison.reason] : []),
    ...all.filter((d) => !failing.includes(d)).map((d) => `${describe(d)} (left by the newer version)`),
  ];
  if (options.json) {
    printJson({
      schema: connection.schema,
      version: packageVersion(),
      current,
      migrations: plan.known.length,
      pending: plan.pending.map((m) => m.name),
      unknownApplied: plan.unknown,
      objectsCompared: comparison?.compared ?? false,
      differences: failing,
      notes,
    });
  } else {
    printLine(`Schema "${connection.schema}" in ${connection.target}, against nestjs-job-queue ${packageVersion()} (${plan.known.length} migrations):`);
    if (!plan.schemaExists) printLine('  the schema does not exist');
    for (const { name } of plan.pending) printLine(`  pending migration: ${name}`);
    for (const difference of failing) printLine(`  ${describe(difference)}`);
    if (current) printLine(`  current${comparison?.compared ? ': every table, column, function, index and trigger the migrations make is there' : ''}`);
  }
  for (const note of notes) printNote(`note: ${note}`);
  if (current) return EXIT.ok;
  const what = [
    plan.pending.length > 0 ? `${plan.pending.length} migration${plan.pending.length === 1 ? '' : 's'} pending` : '',
    failing.length > 0 ? `${failing.length} difference${failing.length === 1 ? '' : 's'} from what the migrations make` : '',
  ].filter(Boolean);
  const fix = plan.pending.length > 0 ? 'run `nestjs-job-queue migrate`' : 'the ledger says applied, so migrate will not repair this: see the differences listed';
  printNote(`JQ_SCHEMA_OUTDATED: schema "${connection.schema}"${plan.schemaExists ? '' : ' does not exist'}: ${what.join(', ')}; ${fix}`);
  return EXIT.notCurrent;
}

function describe({ kind, name, problem, expected, found }: Difference): string {
  if (problem === 'missing') return `missing ${kind}: ${name}${kind === 'column' ? ` (${expected})` : ''}`;
  if (problem === 'invalid') return `invalid index: ${name} (a concurrent build that failed; drop it and build it again)`;
  return `${kind} differs: ${name}: expected ${expected}, found ${found}`;
}
