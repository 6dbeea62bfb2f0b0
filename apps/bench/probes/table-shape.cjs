// Run after `npm run build`: SERVER_URL=postgres://… (a durable server) [N=300] node apps/bench/probes/table-shape.cjs
// What the shape of `jobs` costs a job added in another process, at the SQL level: the same two-column
// insert whose NOTIFY carries the id, then an update of that row by id (the claim's SET), one job at a
// time (2–10 ms apart), the tables taking turns sample by sample, triggers off (session_replication_role
// = replica: the job counters' trigger is message-parts.cjs's), into:
//   least_jobs  id, payload, locked_at: a primary key alone
//   wide_pk     the columns, defaults, generated column and checks of `jobs`, a primary key alone
//   wide_3      the same with the indexes a plain job's insert writes to (primary key, the two unqueued fetch indexes)
//   wide_4      and jobs_locked_by_idx, which the claim's new row version writes to
//   wide_all    and every index of `jobs`
//   jobs        `jobs` itself
const dist = '../../../dist';
const { Client } = require('pg');
const { timeNotifiedTurns, printTurns } = require('./notified-turns.cjs');
const { recreateDatabase, dropDatabase } = require(dist + '/apps/bench/database');
const { createSchema } = require(dist + '/apps/bench/sql-limit');
const { SCHEMA: S, TASK } = require(dist + '/apps/bench/jobs-table');
const N = +(process.env.N || 300);
const server = process.env.SERVER_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
(async () => {
  const url = await recreateDatabase(server, 'bench_table_shape');
  await createSchema(url);
  const [producer, listener, claimer] = [0, 1, 2].map(() => new Client({ connectionString: url }));
  await Promise.all([producer, listener, claimer].map((c) => c.connect()));
  await claimer.query('set synchronous_commit = off');
  await producer.query('set session_replication_role = replica');
  await producer.query(`create table ${S}.least_jobs (id bigint generated always as identity primary key, payload jsonb not null, locked_at timestamptz)`);
  await producer.query(`create table ${S}.wide_pk (like ${S}.jobs including defaults including generated including constraints including identity)`);
  await producer.query(`alter table ${S}.wide_pk add primary key (id)`);
  for (const t of ['wide_3', 'wide_4', 'wide_all']) await producer.query(`create table ${S}.${t} (like ${S}.jobs including defaults including generated including constraints including identity)`);
  const defs = (await producer.query(`select indexname, indexdef from pg_indexes where tablename = 'jobs' and schemaname = $1`, [S.replace(/"/g, '')])).rows;
  for (const { indexname, indexdef } of defs) {
    const make = (t) => producer.query(indexdef.replace(indexname, `${t}_${indexname}`).replace(/ON (\S+)\.jobs /, `ON $1.${t} `));
    if (/pkey|fetch_unqueued|task_fetch/.test(indexname)) await make('wide_3');
    if (/pkey|fetch_unqueued|task_fetch|locked_by/.test(indexname)) await make('wide_4');
    await make('wide_all');
  }
  await listener.query('listen t');
  const tables = ['least_jobs', 'wide_pk', 'wide_3', 'wide_4', 'wide_all', 'jobs'];
  const v = Object.fromEntries(tables.map((t) => [t, {
    add: () => producer.query({ name: `add_${t}`, text: t === 'least_jobs' ? `with a as (insert into ${S}.${t} (payload) values ($1) returning id) select pg_notify('t', id::text) from a` : `with a as (insert into ${S}.${t} (task_identifier, payload) values ('${TASK}', $1) returning id) select pg_notify('t', id::text) from a`, values: ['{}'] }),
    claim: async (n) => (await claimer.query({ name: `claim_${t}`, text: t === 'least_jobs' ? `update ${S}.${t} set locked_at = now() where id = $1 and locked_at is null returning id, payload` : `update ${S}.${t} set locked_at = now(), locked_by = 'w', attempts = attempts + 1, updated_at = now(), started_at = now() where id = $1 and locked_at is null returning id, payload`, values: [n.payload] })).rowCount,
    clean: () => producer.query(`delete from ${S}.${t}`),
  }]));
  printTurns(await timeNotifiedTurns({ variants: v, names: tables, samples: N, listener, producer }), tables, 12);
  await Promise.all([producer, listener, claimer].map((c) => c.end()));
  await dropDatabase(server, 'bench_table_shape');
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
