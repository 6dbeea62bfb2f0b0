import type { Command } from 'commander';
import { withConnection, type ConnectionOptions } from './connection';
import { EXIT, type SetExitCode } from './exit-codes';
import { printJson, printNote } from './output';
import { readStatus } from './status-report';
import { printStatus } from './status-text';

export function registerStatus(program: Command, setExitCode: SetExitCode): void {
  program
    .command('status')
    .description('jobs by state and task, the oldest due job, workers and their heartbeats, the maintenance leader')
    .option('--json', 'print one JSON document')
    .action(async (options: { json?: boolean }, command: Command) => {
      const status = await withConnection(command.optsWithGlobals<ConnectionOptions>(), readStatus);
      if (options.json) printJson(status);
      else printStatus(status);
      if (status.pendingMigrations.length > 0) {
        printNote(`note: ${status.pendingMigrations.length} migration(s) pending for this version: run \`nestjs-job-queue validate\` for details`);
      }
      setExitCode(EXIT.ok);
    });
}
