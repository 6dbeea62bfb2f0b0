import { createHash } from 'node:crypto';
import { chownSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { blockedBy, canUseFolder, USER, type UserIds } from './postgres-user';
import { makeSharedFolder, sharedDir } from './shared-folder';

/**
 * The data folder to use, created, and owned by the postgres user as root: `dataDir`, or, as
 * root when the postgres user cannot reach it and `relocate` is set, a folder under
 * <tmpdir>/nestjs-job-queue-postgres/data named after dataDir's path.
 */
export function prepareDataDir(dataDir: string, ids: UserIds | undefined, relocate: boolean): string {
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
