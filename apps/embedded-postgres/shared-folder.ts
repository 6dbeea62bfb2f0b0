import { chmodSync, lstatSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { USER } from './postgres-user';

/** <tmpdir>/nestjs-job-queue-postgres: a folder owned by root that every user can enter and only root can write to. */
export function sharedDir(): string {
  const dir = join(tmpdir(), 'nestjs-job-queue-postgres');
  makeSharedFolder(dir);
  return dir;
}

export function makeSharedFolder(dir: string): void {
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
