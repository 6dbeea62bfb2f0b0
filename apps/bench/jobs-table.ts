import { jobsChannel } from '../../libs/job-queue/src/sql/identifier';

/** Our schema and the bench's one task (every system's, graphile-worker's too), and what the bench does to the jobs table directly, with no library around it. */
export const SCHEMA = 'job_queue';
export const TASK = 'bench_noop';

/** A pg Client or a TypeORM DataSource: both take a statement and its values. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<unknown>;
}

/** `count` due jobs of the bench's task in one statement, far faster than any add: how the big loads are made. */
export async function insertJobs(db: Queryable, count: number): Promise<void> {
  await db.query(
    `insert into ${SCHEMA}.jobs (task_identifier, payload) select $1, jsonb_build_object('index', i) from generate_series(0, $2 - 1) i`,
    [TASK, count],
  );
}

/**
 * VACUUM (and with `analyze`, ANALYZE) of the jobs table, then a CHECKPOINT where the user
 * may take one: the drain that follows pays neither for an earlier drain's dead rows nor for
 * the full-page writes of a checkpoint falling in it, more than another drain does.
 */
export async function settleJobsTable(db: Queryable, { analyze = false } = {}): Promise<void> {
  await db.query(`vacuum ${analyze ? 'analyze ' : ''}${SCHEMA}.jobs`);
  await db.query('checkpoint').catch((error: unknown) => {
    if ((error as { code?: string }).code !== '42501') throw error; // insufficient_privilege: superuser or pg_checkpoint only
  });
}

/** The NOTIFY an add sends when it commits a due job: every listening worker claims. */
export async function notifyWorkers(db: Queryable): Promise<void> {
  await db.query(`select pg_notify($1, '')`, [jobsChannel(SCHEMA)]);
}
