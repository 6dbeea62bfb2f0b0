import { Client } from 'pg';
import { executePrepared, sendInOneMessage } from '../../libs/job-queue/src/db/sql-prepared';
import { notifyIfDue } from '../../libs/job-queue/src/sql/notify-after';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { KEYLESS_TYPES } from '../../libs/job-queue/src/sql/add';
import { SCHEMA, TASK } from './jobs-table';
import { createSchema } from './sql-limit';

const sql = createQueries(SCHEMA);

/** One system's awaited single add, and how to let go of it (adds-interleaved.ts times them). */
export interface SingleAdder {
  addOne(index: number): Promise<unknown>;
  close(): Promise<void>;
}

/**
 * add()'s own insert for a job without a key (addJobKeyless), with the arguments add() passes,
 * as a named prepared statement (as the library runs it) on one plain node-pg client, on a
 * database given our schema by the library's migrations: what add() one at a time is compared with.
 */
export async function openPlainSqlAdder(url: string): Promise<SingleAdder> {
  await createSchema(url);
  const client = new Client({ connectionString: url });
  await client.connect();
  return {
    addOne: (index) =>
      client.query({ name: 'bench_add_job', text: sql.addJobKeyless, values: [TASK, JSON.stringify({ index }), null, null, null, null, null, null, null, null, null] }),
    close: () => client.end(),
  };
}

/**
 * The message add() sends for such a job without a caller's manager, from a plain node-pg
 * client: begin, addJobKeylessQuiet by SQL PREPARE and EXECUTE, commit, then its NOTIFY in a
 * transaction of its own that does not wait for the disk (sql/notify-after.ts), in one round
 * trip. What add() costs beyond this is the library's; what this costs beyond the raw insert
 * above is the NOTIFY after the commit, which the sustained lines need (docs/benchmark.md).
 */
export async function openPlainMessageAdder(url: string): Promise<SingleAdder> {
  await createSchema(url);
  const client = new Client({ connectionString: url });
  await client.connect();
  const failed = (error: unknown) => {
    throw error;
  };
  return {
    addOne: (index) => {
      const values = [TASK, JSON.stringify({ index }), null, null, null, null, null, null, null, null, null];
      const { preparation, statement } = executePrepared(client, SCHEMA, 'addJobKeylessQuiet', sql.addJobKeylessQuiet, KEYLESS_TYPES, values);
      return sendInOneMessage(client, 'begin', { preparation, statements: [statement], afterCommit: { statements: notifyIfDue(sql.channel, null), failed } });
    },
    close: () => client.end(),
  };
}
