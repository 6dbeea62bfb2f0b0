import { Client } from 'pg';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import type { SingleAdder } from './adds-interleaved';
import { SCHEMA, TASK } from './jobs-table';
import { createSchema } from './sql-limit';

const sql = createQueries(SCHEMA);

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
