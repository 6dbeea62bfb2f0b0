import { createHash } from 'node:crypto';
import type { ClientBase, QueryResult, QueryResultRow } from 'pg';
import { sendThenAfterCommit, type AfterCommit } from './after-commit';
import { sqlLiteral, type InlineValue } from './inline-parameters';

/** The SQL PREPARE name of each (schema, statement): made once, not at every call (a sha1 each time was 3 % of the CPU a single add() took Node, profiled). */
const preparedNames = new Map<string, string>();

function preparedName(schema: string, statement: string): string {
  const key = `${schema}\0${statement}`;
  let name = preparedNames.get(key);
  if (name === undefined) {
    name = `jq_sql_${statement.toLowerCase()}_${createHash('sha1').update(schema).digest('hex').slice(0, 10)}`;
    preparedNames.set(key, name);
  }
  return name;
}

/**
 * What each connection has prepared by SQL PREPARE, for the whole process: the connections of
 * one pool may serve several modules. A message that fails destroys its connection, so a
 * PREPARE that did not happen is never counted on.
 */
const preparedOn = new WeakMap<ClientBase, Set<string>>();

/** A statement for a message of several (which takes no parameters), and what must reach its connection first, once. */
export interface MessageStatement {
  /** The statement's SQL PREPARE and an EXPLAIN of its EXECUTE (its planning), the first time on a connection: sent first, in a transaction of its own. */
  preparation?: string;
  /** What the message carries: the EXECUTE, or through a pooler the statement written in whole. */
  statement: string;
}

/**
 * A statement as a statement of a message of several: an EXECUTE of it, prepared on `client`
 * by SQL PREPARE with its parameters' SQL `types` the first time, when the PREPARE and an
 * EXPLAIN of the EXECUTE go first (`preparation`, worker/claim-connection.ts oneMessage). The
 * EXPLAIN plans it and, sent under the claim settings (`plan_cache_mode = force_generic_plan`,
 * after their begin), keeps the generic plan, so that the message's EXECUTE does not plan (an
 * ANALYZE of a table it reads makes it plan once more). Its name is short and lower-case
 * (PostgreSQL folds and cuts identifiers at 63 bytes), the schema's hash in it, apart from
 * node-pg's named statements.
 */
export function executePrepared(client: ClientBase, schema: string, statement: string, text: string, types: readonly string[], values: readonly InlineValue[]): MessageStatement {
  const name = preparedName(schema, statement);
  const execute = `execute ${name}(${values.map(sqlLiteral).join(', ')})`;
  const prepared = preparedOn.get(client) ?? new Set<string>();
  preparedOn.set(client, prepared);
  if (prepared.has(name)) return { statement: execute };
  prepared.add(name);
  // The generic plan ignores the values: nulls spare the server parsing a large literal twice.
  return { preparation: `prepare ${name} (${types.join(', ')}) as ${text}; explain execute ${name}(${values.map(() => 'null').join(', ')})`, statement: execute };
}

/**
 * Sends `statements` on `client` as one transaction begun by `begin`, in one message (the
 * simple query protocol: no parameters), `preparation` first in a transaction of its own, and
 * `afterCommit` after the commit in the same message (db/after-commit.ts: their failure is not
 * the caller's); the rows of the last of `statements`. The claim's messages
 * (worker/claim-connection.ts oneMessage) and JobQueueDatabase.runGenericPlan's go this way.
 */
export async function sendInOneMessage<Row extends QueryResultRow>(
  client: ClientBase,
  begin: string,
  { preparation, statements, afterCommit }: { preparation?: string; statements: string[]; afterCommit?: AfterCommit },
): Promise<Row[]> {
  if (preparation) await client.query(`${begin}; ${preparation}; commit`);
  const text = [begin, ...statements, 'commit'].join('; ');
  if (!afterCommit?.statements.length) return rowsBeforeCommit((await client.query(text)) as unknown as QueryResult<Row> | Array<QueryResult<Row>>);
  const { results, committedRows } = await sendThenAfterCommit<Row>(client, text, afterCommit);
  return committedRows ?? rowsBeforeCommit(results!);
}

/** The rows of the statement before a message's commit. */
function rowsBeforeCommit<Row extends QueryResultRow>(results: QueryResult<Row> | Array<QueryResult<Row>>): Row[] {
  if (!Array.isArray(results) || results.length < 3) throw new Error('a message of several statements was answered as one');
  return results[results.length - 2].rows;
}

/** PostgreSQL's "cached plan must not change result type" (SQLSTATE 0A000, feature_not_supported). */
export function isResultTypeChanged(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  return code === '0A000' && /cached plan must not change result type/.test(message ?? '');
}
