import { Query, type ClientBase, type QueryResult, type QueryResultRow } from 'pg';

/**
 * Statements sent after a transaction's commit (the NOTIFYs of sql/notify-after.ts), and who is
 * told when they fail. They fail rarely (the server's notification queue full, the connection
 * lost), and then after the commit: the caller must get its result all the same, for a caller
 * told that its add failed would add the job twice, and a release written again would lose the
 * cancels its first write reported.
 */
export interface AfterCommit {
  statements: readonly string[];
  failed(error: unknown): void;
}

/** The statement a message carries between its commit and `AfterCommit`'s statements: its row says the commit happened. */
const COMMITTED = 'jq_committed';

/**
 * Sends `text` (one message of statements, its transaction's commit last) and then
 * `after.statements`, in the same message: one round trip, as if the NOTIFY were in the
 * transaction. Resolves with every statement's result, or, when the failure came after the
 * commit, with the rows of the last statement that returned some before it (`committedRows`)
 * and `after.failed` told. A marker row between the two parts tells them apart (node-pg's
 * Query emits each row as it comes, and its error loses the results before it).
 */
export async function sendThenAfterCommit<Row extends QueryResultRow>(client: ClientBase, text: string, after: AfterCommit): Promise<{ results?: Array<QueryResult<Row>>; committedRows?: Row[] }> {
  let lastResult: unknown;
  let rows: Row[] = [];
  let committedRows: Row[] | undefined;
  const outcome = await new Promise<{ error?: unknown; results?: Array<QueryResult<Row>> }>((resolve) => {
    const query = new Query([text, `select true as ${COMMITTED}`, ...after.statements].join('; '), undefined, (error: unknown, results: unknown) =>
      resolve(error ? { error } : { results: results as Array<QueryResult<Row>> }),
    );
    query.on('row', (row: Row, result: unknown) => {
      if (committedRows !== undefined) return;
      if (row[COMMITTED] === true) committedRows = rows;
      else if (result === lastResult) rows.push(row);
      else [lastResult, rows] = [result, [row]];
    });
    void client.query(query);
  });
  if (outcome.results) return { results: outcome.results.slice(0, -1 - after.statements.length) };
  if (committedRows === undefined) throw outcome.error;
  await afterCommitFailed(client, outcome.error, after);
  return { committedRows };
}

/** `after.statements` in a message of their own, on `client` just after its commit: a failure is `after.failed`'s, not the caller's. */
export async function sendAfterCommit(client: ClientBase, after: AfterCommit): Promise<void> {
  if (after.statements.length === 0) return;
  await client.query(after.statements.join('; ')).catch((error: unknown) => afterCommitFailed(client, error, after));
}

/** The statements after a commit failed: their transaction, if it is still open (aborted), rolled back, and `after.failed` told. */
async function afterCommitFailed(client: ClientBase, error: unknown, after: AfterCommit): Promise<void> {
  // A broken connection fails this too, and its pool drops it when it is given back.
  await client.query('rollback').catch(() => undefined);
  after.failed(error);
}
