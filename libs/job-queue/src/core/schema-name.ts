import { JobQueueError } from './errors';

/**
 * The schema name is interpolated into SQL (identifiers cannot be bound as parameters),
 * so it must be a plain identifier. It is also part of the NOTIFY channel name, which
 * PostgreSQL limits to 63 bytes: hence 50 characters at most.
 */
const PLAIN_IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const MAX_SCHEMA_LENGTH = 50;

export function validateSchemaName(schema: unknown): string {
  if (typeof schema !== 'string' || !PLAIN_IDENTIFIER.test(schema) || schema.length > MAX_SCHEMA_LENGTH) {
    throw new JobQueueError(
      'JQ_INVALID_SCHEMA',
      `schema must be a plain identifier (letters, digits, underscore; not starting with a digit) ` +
        `of at most ${MAX_SCHEMA_LENGTH} characters, got ${JSON.stringify(schema)}`,
    );
  }
  return schema;
}
