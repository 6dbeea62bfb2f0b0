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
 * A statement for a message of several (which takes no parameters): what to send in it, and
 * what must reach the connection first, in a transaction of its own (none once it has).
 */
export interface MessageStatement {
  /** The statement's SQL PREPARE and the making of its plan (an EXPLAIN of the EXECUTE), the first time on a connection. */
  preparation?: string;
  execute: string;
}

/**
 * A statement as a statement of a message of several: an EXECUTE of it, prepared on `client`
 * by SQL PREPARE with its parameters' SQL `types` the first time, when the PREPARE and an
 * EXPLAIN of the EXECUTE go first (`preparation`). The EXPLAIN plans the statement: under
 * `plan_cache_mode = force_generic_plan` (the claim connection's settings) it keeps the generic
 * plan it made, so that the first EXECUTE does not plan. A rate-limited claim's first EXECUTE
 * would plan under its task's lock, after the begin whose time it records as the start
 * (15 ms on a quiet server, 50–100 ms as workers start together: every process's claims of the
 * task waited behind it). Its name is short and lower-case (PostgreSQL folds and cuts
 * identifiers at 63 bytes), the schema's hash in it, apart from node-pg's named statements.
 */
export function executePrepared(client: ClientBase, schema: string, statement: string, text: string, types: readonly string[], values: readonly InlineValue[]): MessageStatement {
  const name = `jq_sql_${statement.toLowerCase()}_${createHash('sha1').update(schema).digest('hex').slice(0, 10)}`;
  const execute = `execute ${name}(${values.map(sqlLiteral).join(', ')})`;
  const prepared = preparedOn.get(client) ?? new Set<string>();
  preparedOn.set(client, prepared);
  if (prepared.has(name)) return { execute };
  prepared.add(name);
  return { preparation: `prepare ${name} (${types.join(', ')}) as ${text}; explain ${execute}`, execute };
}

/** PostgreSQL's "cached plan must not change result type" (SQLSTATE 0A000, feature_not_supported). */
export function isResultTypeChanged(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  return code === '0A000' && /cached plan must not change result type/.test(message ?? '');
}
