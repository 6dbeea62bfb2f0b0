import { randomInt } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, type Notification } from 'pg';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { CLAIM_SESSION_SETTINGS } from '../../libs/job-queue/src/worker/claim-connection';
import type { ClaimedRow } from '../../libs/job-queue/src/worker/claimed-job';
import { SCHEMA, TASK } from './jobs-table';
import { completeClaimed } from './complete-claimed';
import { percentile, type Latency } from './suite';

const sql = createQueries(SCHEMA);
const WORKER = 'bench-sql-latency';

/**
 * What a job added in another process must wait on this machine whatever the library around the
 * SQL: an add's commit (its flush), the NOTIFY's way to a listening connection, and one claim's
 * round trip. Each sample as the bench's latency lines take theirs (one job at a time, 2–10 ms
 * apart), timed from before the add to the claim's rows back.
 */
export interface SqlLatencyResult {
  /**
   * The library's own statements on plain node-pg clients: add()'s insert with its NOTIFY naming
   * the job (addJobKeylessNamed, one autocommitted statement: one transaction, where add()
   * without a manager sends two), heard by a listening client, then the worker's claim of that
   * job (claimJobsById) on a client with the claim settings.
   */
  ourStatements: Latency;
  /**
   * The least any queue on PostgreSQL can do: a two-column insert whose NOTIFY carries the new
   * id, then an update of that one row by its id on the listening connection, its commit not
   * waiting for the disk. No ordering, no locking past the row, nothing returned but the payload.
   */
  least: Latency;
}

/** On a database that has our schema (sql-limit.ts createSchema) and no jobs: both floors, `samples` each. */
export async function measureSqlLatency(url: string, samples: number): Promise<SqlLatencyResult> {
  const producer = new Client({ connectionString: url });
  const listener = new Client({ connectionString: url });
  const claimer = new Client({ connectionString: url });
  try {
    await Promise.all([producer.connect(), listener.connect(), claimer.connect()]);
    await claimer.query(CLAIM_SESSION_SETTINGS);
    await claimer.query({ text: sql.registerWorker, values: [WORKER, 20_000, null, null, null] });
    const ourStatements = await timeSamples(samples, listener, sql.channel, async () => {
      await producer.query({ name: 'bench_add_job', text: sql.addJobKeylessNamed, values: [TASK, '{}', null, null, null, null, null, null, null, null, null] });
    }, async (notification) => {
      const claimed = await claimer.query<ClaimedRow>({ name: 'bench_claim', text: sql.claimJobsById, values: [[TASK], [], 1, WORKER, 1, [notification.payload]] });
      if (claimed.rows.length !== 1) throw new Error(`plain SQL latency: the claim took ${claimed.rows.length} jobs, expected 1`);
      return async () => void (await completeClaimed(claimer, WORKER, claimed.rows)); // untimed: every sample starts from an empty table
    });
    await producer.query(`create table ${SCHEMA}.least_jobs (id bigint generated always as identity primary key, payload jsonb not null, locked_at timestamptz)`);
    await listener.query('set synchronous_commit = off');
    let heardId = '';
    const least = await timeSamples(samples, listener, 'least_jobs', async () => {
      await producer.query({
        name: 'bench_least_add',
        text: `with added as (insert into ${SCHEMA}.least_jobs (payload) values ($1) returning id) select pg_notify('least_jobs', id::text) from added`,
        values: ['{}'],
      });
    }, async (notification) => {
      heardId = notification.payload ?? '';
      const claimed = await listener.query({ name: 'bench_least_claim', text: `update ${SCHEMA}.least_jobs set locked_at = now() where id = $1 and locked_at is null returning id, payload`, values: [heardId] });
      if (claimed.rowCount !== 1) throw new Error(`the least claim took ${claimed.rowCount} rows of job ${heardId}`);
      return async () => void (await producer.query(`delete from ${SCHEMA}.least_jobs where id = $1`, [heardId]));
    });
    return { ourStatements, least };
  } finally {
    await Promise.all([producer, listener, claimer].map((client) => client.end().catch(() => undefined)));
  }
}

/**
 * `samples` times: `add`, and on the NOTIFY heard on `channel`, `claim` (resolving to the untimed
 * clean-up of what it claimed); from before the add to the claim's end.
 */
async function timeSamples(
  samples: number,
  listener: Client,
  channel: string,
  add: () => Promise<void>,
  claim: (notification: Notification) => Promise<() => Promise<void>>,
): Promise<Latency> {
  await listener.query(`listen "${channel}"`);
  const latencies: number[] = [];
  try {
    for (let i = 0; i < samples; i++) {
      await sleep(randomInt(2, 11));
      const heard = new Promise<Notification>((resolve) => listener.once('notification', resolve));
      const started = performance.now();
      const adding = add(); // the claim goes when the NOTIFY is heard, as a worker's does, whether or not the add's answer is back
      const cleanUp = await claim(await heard);
      latencies.push(performance.now() - started);
      await adding;
      await cleanUp();
    }
  } finally {
    await listener.query(`unlisten "${channel}"`);
  }
  latencies.sort((a, b) => a - b);
  return { p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}
