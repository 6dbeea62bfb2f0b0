import { Command, CommanderError, Option } from 'commander';
import { registerExportSql } from './export-sql-command';
import { exitCodeOf, EXIT } from './exit-codes';
import { toFailure } from './failures';
import { registerJobs } from './jobs-command';
import { registerMigrate } from './migrate-command';
import { printNote } from './output';
import { packageVersion } from './package-version';
import { registerStatus } from './status-command';
import { registerValidate } from './validate-command';

/**
 * The bin `nestjs-job-queue`: its commands, and what becomes of an error (one line,
 * `JQ_CODE: message`, on stderr, and the exit code of cli/exit-codes.ts). Returns the exit
 * code rather than exiting, so that main.ts lets the output drain first.
 */
export async function runCli(argv: string[]): Promise<number> {
  let exitCode: number = EXIT.ok;
  const setExitCode = (code: number) => {
    exitCode = code;
  };
  const program = new Command('nestjs-job-queue')
    .description('Admin commands for nestjs-job-queue: migrations, schema checks, status and jobs, on PostgreSQL directly (no Nest app).')
    .version(packageVersion(), '-V, --version')
    .addOption(new Option('--database-url <url>', 'postgres://user:password@host:5432/database').env('DATABASE_URL'))
    .option('--schema <name>', "the job queue's schema (the module's `schema` option)", 'job_queue')
    .option('--connect-timeout <seconds>', 'how long to wait for the server to accept the connection', '10')
    .option('--transaction-pooling', 'the database URL goes through a pooler in transaction mode (PgBouncer, RDS Proxy, Supavisor); or JOB_QUEUE_TRANSACTION_POOLING=1')
    .addHelpText('after', '\nExit codes: 0 ok; 1 validate found the schema not current; 2 cannot connect; 3 bad usage or input;\n4 schema not installed; 5 a job action refused for some ids; 6 the database refused a statement; 7 a bug.')
    // commander's errors become ours: thrown, not printed or exited on
    .exitOverride()
    .configureOutput({ outputError: () => undefined })
    .showSuggestionAfterError();
  registerMigrate(program, setExitCode);
  registerValidate(program, setExitCode);
  registerStatus(program, setExitCode);
  registerJobs(program, setExitCode);
  registerExportSql(program, setExitCode);

  try {
    await program.parseAsync(argv);
    return exitCode;
  } catch (error) {
    // --help and --version end the parse with an "error" of exit code 0
    if (error instanceof CommanderError && error.exitCode === 0) return EXIT.ok;
    // a command group without its subcommand (`jobs`): commander has printed its help on stderr
    if (error instanceof CommanderError && error.code === 'commander.help') {
      printNote('JQ_BAD_USAGE: a command is missing: see the help above');
      return EXIT.usage;
    }
    const failure = toFailure(error);
    printNote(`${failure.code}: ${failure.message}`);
    return exitCodeOf(failure.code);
  }
}
