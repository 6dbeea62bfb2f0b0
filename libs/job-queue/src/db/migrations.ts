import type { MigrationInterface } from 'typeorm';
// The repository's top-level migrations/, by the package's subpath import (package.json
// "imports"): dist/migrations/ in the package, migrations/ in the repository (tsconfig paths).
import { createJobQueueMigrations as migrationsFor } from '#migrations';
import { validateSchemaName } from '../core/schema-name';

/**
 * The migrations for a schema, oldest first. The module runs them itself at startup
 * (`migrationsRun`, default true); teams that run migrations with the TypeORM CLI add
 * these classes to their DataSource's `migrations` instead.
 */
export function createJobQueueMigrations(schema = 'job_queue'): Array<new () => MigrationInterface> {
  return migrationsFor(validateSchemaName(schema));
}

/** The migrations for the default schema `job_queue`. */
export const JobQueueMigrations = createJobQueueMigrations();
