import type { MigrationInterface } from 'typeorm';
import { createJobQueueMigrations } from '../db/migrations';
import { appliedMigrations } from '../db/run-migrations';
import type { CliConnection } from './connection';

/** One migration of this version, by the name the ledger records. */
export interface KnownMigration {
  name: string;
  Migration: new () => MigrationInterface;
}

/** This version's migrations against the ledger of a schema. */
export interface MigrationPlan {
  /** Every migration this version has, oldest first. */
  known: KnownMigration[];
  /** Those the ledger does not list yet, oldest first. */
  pending: KnownMigration[];
  /** Names the ledger lists that this version does not know: applied by a newer version. */
  unknown: string[];
  /** Whether the schema exists at all. */
  schemaExists: boolean;
}

/** This version's migrations for `schema` (the ones the module runs), with their names. */
export function knownMigrations(schema: string): KnownMigration[] {
  return createJobQueueMigrations(schema).map((Migration) => ({ name: new Migration().name ?? Migration.name, Migration }));
}

/** Reads the ledger (`<schema>.migrations`) as the module's runner does, and compares it with this version's migrations. */
export async function readMigrationPlan(connection: CliConnection): Promise<MigrationPlan> {
  const known = knownMigrations(connection.schema);
  const applied = await appliedMigrations(connection, connection.schema);
  const names = new Set(known.map((m) => m.name));
  const [{ exists }] = await connection.query<{ exists: boolean }>('select exists (select 1 from pg_namespace where nspname = $1) as exists', [connection.schema]);
  return {
    known,
    pending: known.filter((m) => !applied.has(m.name)),
    unknown: [...applied].filter((name) => !names.has(name)).sort(),
    schemaExists: exists,
  };
}
