/**
 * A PgBouncer of one's own in front of a PostgreSQL server, for the tests (test/support/pgbouncer.ts)
 * and the benchmark's pooler lines: Debian's `pgbouncer` package (apt-get install pgbouncer;
 * .ci/run installs it), started on a free port of 127.0.0.1 with a config in a temp folder,
 * pool_mode transaction by default, trust authentication for the server URL's user (the
 * password, if any, goes in the database line, for PgBouncer's own login to the server). Every
 * database of the server is reachable through it by name. Run as root (a container, CI), it
 * runs as the `postgres` user: PgBouncer refuses to run as root. PGBOUNCER_PATH overrides where
 * the binary is looked for.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { postgresUserIds, USER } from '../embedded-postgres/postgres-user';

const CANDIDATES = [process.env.PGBOUNCER_PATH, '/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer'].filter((path): path is string => !!path);

export const NO_PGBOUNCER_MESSAGE = 'PgBouncer is not installed (apt-get install pgbouncer, as .ci/run does, or set PGBOUNCER_PATH)';

export function pgbouncerPath(): string | undefined {
  return CANDIDATES.find((path) => existsSync(path));
}

export interface PgBouncerOptions {
  /** Default `transaction`. */
  poolMode?: 'transaction' | 'session' | 'statement';
  /** Server connections per database and user (default 20). */
  defaultPoolSize?: number;
}

export interface PgBouncer {
  readonly port: number;
  /** `url` (a URL of the server PgBouncer is in front of) with PgBouncer's address instead: the same database and user, through the pooler. */
  through(url: string): string;
  /** What PgBouncer printed (its log), for a failure's message. */
  readonly output: string;
  stop(): Promise<void>;
}

/** Starts PgBouncer in front of the server of `serverUrl`; resolves once it accepts connections. */
export async function startPgBouncer(serverUrl: string, options: PgBouncerOptions = {}): Promise<PgBouncer> {
  const binary = pgbouncerPath();
  if (!binary) throw new Error(NO_PGBOUNCER_MESSAGE);
  const server = new URL(serverUrl);
  const user = decodeURIComponent(server.username || 'postgres');
  const password = decodeURIComponent(server.password);
  const dir = mkdtempSync(join(tmpdir(), 'jq-pgbouncer-'));
  const ids = postgresUserIds(); // as root: PgBouncer runs as the postgres user, which must read its folder
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const config = join(dir, 'pgbouncer.ini');
    const userlist = join(dir, 'userlist.txt');
    const quoted = (value: string) => `"${value.replace(/"/g, '""')}"`;
    writeFileSync(userlist, `${quoted(user)} ${quoted(password)}\n`, { mode: 0o600 });
    const credentials = `user=${user}${password ? ` password=${password}` : ''}`;
    writeFileSync(
      config,
      [
        '[databases]',
        `* = host=${server.hostname} port=${server.port || 5432} ${credentials}`,
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${port}`,
        'unix_socket_dir =',
        'auth_type = trust',
        `auth_file = ${userlist}`,
        `pool_mode = ${options.poolMode ?? 'transaction'}`,
        'max_client_conn = 2000',
        `default_pool_size = ${options.defaultPoolSize ?? 20}`,
        '',
      ].join('\n'),
      { mode: 0o600 },
    );
    if (ids) for (const path of [dir, config, userlist]) chownSync(path, ids.uid, ids.gid);
    const child = spawn(binary, [...(ids ? ['-u', USER] : []), config], { stdio: ['ignore', 'pipe', 'pipe'] });
    const bouncer = new RunningPgBouncer(child, port, dir);
    try {
      await bouncer.ready();
      return bouncer;
    } catch (error) {
      await bouncer.stop(false);
      // another process took the port between freePort() and PgBouncer's bind: try another
      if (attempt < 3 && /Address already in use/.test(bouncer.output)) continue;
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }
}

class RunningPgBouncer implements PgBouncer {
  output = '';
  private readonly exited: Promise<void>;
  private exitedYet = false;

  /** A process that exits without stop() (a test file cut short at its timeout) takes PgBouncer with it. */
  private readonly killOnExit = () => {
    this.child.kill('SIGKILL');
    rmSync(this.dir, { recursive: true, force: true });
  };

  constructor(
    private readonly child: ChildProcess,
    readonly port: number,
    private readonly dir: string,
  ) {
    child.stdout!.on('data', (chunk) => (this.output += chunk));
    child.stderr!.on('data', (chunk) => (this.output += chunk));
    this.exited = new Promise((resolve) => child.on('close', () => ((this.exitedYet = true), resolve())));
    process.once('exit', this.killOnExit);
  }

  through(url: string): string {
    const parsed = new URL(url);
    parsed.hostname = '127.0.0.1';
    parsed.port = String(this.port);
    return parsed.toString();
  }

  /** Resolves once the port accepts connections; rejects if PgBouncer exits first or takes over 10 s. */
  async ready(): Promise<void> {
    const deadline = Date.now() + 10_000;
    while (!(await accepts(this.port))) {
      if (this.exitedYet) throw new Error(`PgBouncer exited at startup:\n${this.output}`);
      if (Date.now() > deadline) throw new Error(`PgBouncer did not listen on port ${this.port} within 10 s:\n${this.output}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** SIGTERM (PgBouncer closes every connection at once), then its folder is removed. */
  async stop(removeDir = true): Promise<void> {
    process.off('exit', this.killOnExit);
    if (!this.exitedYet) this.child.kill('SIGTERM');
    await this.exited;
    if (removeDir) rmSync(this.dir, { recursive: true, force: true });
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}
