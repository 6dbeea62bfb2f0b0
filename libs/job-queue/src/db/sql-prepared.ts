import { createHash } from 'node:crypto';
import type { ClientBase } from 'pg';
import { sqlLiteral, type InlineValue } from './inline-parameters';

/**
 * What each connection has prepared by SQL PREPARE, for the whole process: the connections of
 * one pool may serve several modules. A message that fails destroys its connection, so a
 * PREPARE that did not happen is never counted on.
 */
const preparedOn = new WeakMap<ClientBase, Set<string>>();

/**
 * A statement as statements of a message of several (which takes no parameters): an EXECUTE of
 * it, prepared on `client` by SQL PREPARE with its parameters' SQL `types` the first time (the
 * PREPARE then goes first). Its name is short and lower-case (PostgreSQL folds and cuts
 * identifiers at 63 bytes), the schema's hash in it, apart from node-pg's named statements.
 */
export function executePrepared(client: ClientBase, schema: string, statement: string, text: string, types: readonly string[], values: readonly InlineValue[]): string[] {
  const name = `jq_sql_${statement.toLowerCase()}_${createHash('sha1').update(schema).digest('hex').slice(0, 10)}`;
  const execute = `execute ${name}(${values.map(sqlLiteral).join(', ')})`;
  const prepared = preparedOn.get(client) ?? new Set<string>();
  preparedOn.set(client, prepared);
  if (prepared.has(name)) return [execute];
  prepared.add(name);
  return [`prepare ${name} (${types.join(', ')}) as ${text}`, execute];
}

/** PostgreSQL's "cached plan must not change result type" (SQLSTATE 0A000, feature_not_supported). */
export function isResultTypeChanged(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  return code === '0A000' && /cached plan must not change result type/.test(message ?? '');
}
