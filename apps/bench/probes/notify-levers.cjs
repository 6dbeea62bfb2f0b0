// Run after `npm run build`: DATABASE_URL=postgres://… (a durable server) [N=400] node apps/bench/probes/notify-levers.cjs
// Issue 30's cross-process levers, each measured on its own at the SQL level: a job added in another
// process, from before its add to the claim's rows back, one job at a time (2–10 ms apart), the
// variants taking turns sample by sample so that the disk's drift falls on all alike.
//   ours            add()'s insert with its NOTIFY (addJobKeyless), the claim (claimJobs, 1 job) on a claim connection
//   on listener     the same claim on the connection that heard the NOTIFY
//   by id           the NOTIFY carries the job's id; the claim is one update of that row by id (the claim's own SET and RETURNING)
//   least           that insert, and an update by id of its one row: what any queue on PostgreSQL must wait
const { Client } = require('pg');
const { timeNotifiedTurns, printTurns } = require('./notified-turns.cjs');
const { createQueries } = require('../../../dist/libs/job-queue/src/sql/queries');
const { CLAIMED_COLUMNS } = require('../../../dist/libs/job-queue/src/sql/claim');
const { CLAIM_SESSION_SETTINGS } = require('../../../dist/libs/job-queue/src/worker/claim-connection');
const { recreateDatabase, dropDatabase } = require('../../../dist/apps/bench/database');
const { createSchema } = require('../../../dist/apps/bench/sql-limit');
const { SCHEMA: S, TASK } = require('../../../dist/apps/bench/jobs-table');
const sql = createQueries(S);
const N = +(process.env.N || 400);
const ADD = [TASK, '{}', null, null, null, null, null, null, null, null, null];
(async () => {
  const url = await recreateDatabase(process.env.DATABASE_URL, 'bench_notify_levers');
  await createSchema(url);
  const [producer, listener, claimer] = [0, 1, 2].map(() => new Client({ connectionString: url }));
  await Promise.all([producer, listener, claimer].map((c) => c.connect()));
  await claimer.query(CLAIM_SESSION_SETTINGS);
  await listener.query(CLAIM_SESSION_SETTINGS);
  await claimer.query({ text: sql.registerWorker, values: ['w', 20000, null, null, null] });
  await producer.query(`create table ${S}.least_jobs (id bigint generated always as identity primary key, payload jsonb not null, locked_at timestamptz)`);
  // addJobKeyless with its NOTIFY naming the job (the lever "by id"): the library's statement, its payload ''  replaced
  const addWithId = sql.addJobKeyless.replace(`pg_notify('${sql.channel}', '')`, `pg_notify('${sql.channel}', inserted.id::text)`);
  if (addWithId === sql.addJobKeyless) throw new Error('addJobKeyless has changed: the NOTIFY to replace is not there');
  const byId = `update ${S}.jobs j set attempts = j.attempts + 1, locked_at = now(), locked_by = $2, updated_at = now(), started_at = now()
    where j.id = (select e.id from ${S}.jobs e where e.id = $1 and e.is_available and e.queue_name is null and e.run_at <= now() and e.cancel_requested_at is null
                  and e.task_identifier = any($3::text[]) and exists (select 1 from ${S}.workers w where w.id = $2) for update skip locked)
    returning ${CLAIMED_COLUMNS}`;
  await listener.query(`listen "${sql.channel}"`);
  await listener.query('listen least_jobs');
  const ourAdd = (id) => producer.query({ name: id ? 'add_id' : 'add', text: id ? addWithId : sql.addJobKeyless, values: ADD });
  const leastAdd = (notify) => producer.query({ name: notify ? 'least_add' : 'least_add_ours', text: `with added as (insert into ${S}.least_jobs (payload) values ($1) returning id) select pg_notify('${notify ? 'least_jobs' : sql.channel}', id::text) from added`, values: ['{}'] });
  const claimOn = (client) => async () => { const r = await client.query({ name: 'claim', text: sql.claimJobs, values: [[TASK], [], 1, 'w', 1, []] }); return r.rows.length; };
  const variants = {
    ours: { add: () => ourAdd(false), claim: claimOn(claimer), clean: () => producer.query(`delete from ${S}.jobs`) },
    'on listener': { add: () => ourAdd(false), claim: claimOn(listener), clean: () => producer.query(`delete from ${S}.jobs`) },
    'by id': { add: () => ourAdd(true), claim: async (n) => (await claimer.query({ name: 'by_id', text: byId, values: [n.payload, 'w', [TASK]] })).rows.length, clean: () => producer.query(`delete from ${S}.jobs`) },
    least: { add: () => leastAdd(true), claim: async (n) => (await listener.query({ name: 'least_claim', text: `update ${S}.least_jobs set locked_at = now() where id = $1 and locked_at is null returning id, payload`, values: [n.payload] })).rowCount, clean: () => producer.query(`delete from ${S}.least_jobs`) },
  };
  const names = Object.keys(variants);
  printTurns(await timeNotifiedTurns({ variants, names, samples: N, listener, producer }), names, 12);
  await Promise.all([producer, listener, claimer].map((c) => c.end()));
  await dropDatabase(process.env.DATABASE_URL, 'bench_notify_levers');
})().catch((e) => { console.error(e); process.exit(1); });
