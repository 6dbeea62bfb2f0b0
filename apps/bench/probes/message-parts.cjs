// Run after `npm run build`: SERVER_URL=postgres://… (a durable server) [N=400] [ONLY='name|name'] node apps/bench/probes/message-parts.cjs
// Where a job added in another process spends its time before a claim has it, part by part, at the
// SQL level: one job at a time (2–10 ms apart), from before the add to the claim's rows back, the
// variants taking turns sample by sample so that the disk's drift falls on all. Every variant but
// `least` claims with the worker's claimJobsById on a connection with the claim settings.
//   message          add() without a manager as landed: begin, addJobKeylessQuiet, commit, the marker, then the
//                    NOTIFY naming the job in a transaction of its own that does not wait for its flush
//   message, by name the same, the NOTIFY's currval naming the sequence instead of pg_get_serial_sequence() (no difference measured)
//   message, in tx   the same message with the NOTIFY in the add's transaction (addJobKeylessNamed): one transaction
//   statement        addJobKeylessNamed alone, autocommitted, node-pg's prepared statement (the bench's raw insert)
//   statement, no triggers  the same with the job counters' trigger off (session_replication_role = replica)
//   least insert, jobs  a two-column insert into jobs whose NOTIFY carries the id (the table's cost without our statement's)
//   least insert, jobs, update  the same, claimed by an update of that row by id (the claim's SET) instead of claimJobsById
//   least            a two-column insert whose NOTIFY carries the id, an update of that row by id
const { Client } = require('pg');
const { timeNotifiedTurns, printTurns } = require('./notified-turns.cjs');
const dist = '../../../dist';
const { createQueries } = require(`${dist}/libs/job-queue/src/sql/queries`);
const { KEYLESS_TYPES } = require(`${dist}/libs/job-queue/src/sql/add`);
const { notifyIfDue } = require(`${dist}/libs/job-queue/src/sql/notify-after`);
const { executePrepared, sendInOneMessage } = require(`${dist}/libs/job-queue/src/db/sql-prepared`);
const { CLAIM_SESSION_SETTINGS } = require(`${dist}/libs/job-queue/src/worker/claim-connection`);
const { recreateDatabase, dropDatabase } = require(`${dist}/apps/bench/database`);
const { createSchema } = require(`${dist}/apps/bench/sql-limit`);
const { SCHEMA: S, TASK } = require(`${dist}/apps/bench/jobs-table`);
const sql = createQueries(S);
const server = process.env.SERVER_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const N = +(process.env.N || 400);
const ADD = [TASK, '{}', null, null, null, null, null, null, null, null, null];
(async () => {
  const url = await recreateDatabase(server, 'bench_message_parts');
  await createSchema(url);
  const [producer, listener, claimer] = [0, 1, 2].map(() => new Client({ connectionString: url }));
  await Promise.all([producer, listener, claimer].map((c) => c.connect()));
  await claimer.query(CLAIM_SESSION_SETTINGS);
  await listener.query('set synchronous_commit = off');
  await claimer.query({ text: sql.registerWorker, values: ['w', 20000, null, null, null] });
  await producer.query(`create table ${S}.least_jobs (id bigint generated always as identity primary key, payload jsonb not null, locked_at timestamptz)`);
  await listener.query(`listen "${sql.channel}"`);
  await listener.query('listen least_jobs');
  const failed = (error) => { throw error; };
  const message = (statement, after) => () => {
    const { preparation, statement: execute } = executePrepared(producer, S, statement, sql[statement], KEYLESS_TYPES, ADD);
    return sendInOneMessage(producer, 'begin', { preparation, statements: [execute], afterCommit: after && { statements: after, failed } });
  };
  const landed = notifyIfDue(sql.channel, null, sql.jobsTable);
  const byName = landed.map((s) => s.replace(`currval(pg_get_serial_sequence('${sql.jobsTable}', 'id'))`, `currval('${sql.jobsTable}_id_seq')`));
  if (byName.join() === landed.join()) throw new Error('notifyIfDue has changed: the currval to replace is not there');
  const statement = () => producer.query({ name: 'add_named', text: sql.addJobKeylessNamed, values: ADD });
  const claim = async (n) => (await claimer.query({ name: 'by_id', text: sql.claimJobsById, values: [[TASK], [], 1, 'w', 1, [n.payload]] })).rows.length;
  const clean = () => producer.query(`delete from ${S}.jobs`);
  const variants = {
    message: { add: message('addJobKeylessQuiet', landed), claim, clean },
    'message, by name': { add: message('addJobKeylessQuiet', byName), claim, clean },
    'message, in tx': { add: message('addJobKeylessNamed'), claim, clean },
    statement: { add: statement, claim, clean },
    'statement, no triggers': { add: statement, claim, clean, before: 'set session_replication_role = replica', after: 'set session_replication_role = origin' },
    'least insert, jobs': { add: () => producer.query({ name: 'least_jobs_add', text: `with added as (insert into ${S}.jobs (task_identifier, payload) values ($1, $2) returning id) select pg_notify('${sql.channel}', id::text) from added`, values: [TASK, '{}'] }), claim, clean },
    'least insert, jobs, update': {
      add: () => producer.query({ name: 'least_jobs_add', text: `with added as (insert into ${S}.jobs (task_identifier, payload) values ($1, $2) returning id) select pg_notify('${sql.channel}', id::text) from added`, values: [TASK, '{}'] }),
      claim: async (n) => (await claimer.query({ name: 'jobs_update', text: `update ${S}.jobs set attempts = attempts + 1, locked_at = now(), locked_by = 'w', updated_at = now(), started_at = now() where id = $1 and locked_at is null returning id, payload`, values: [n.payload] })).rowCount,
      clean,
    },
    least: {
      add: () => producer.query({ name: 'least_add', text: `with added as (insert into ${S}.least_jobs (payload) values ($1) returning id) select pg_notify('least_jobs', id::text) from added`, values: ['{}'] }),
      claim: async (n) => (await claimer.query({ name: 'least_claim', text: `update ${S}.least_jobs set locked_at = now() where id = $1 and locked_at is null returning id, payload`, values: [n.payload] })).rowCount,
      clean: () => producer.query(`delete from ${S}.least_jobs`),
    },
  };
  const names = process.env.ONLY ? process.env.ONLY.split('|') : Object.keys(variants);
  printTurns(await timeNotifiedTurns({ variants, names, samples: N, listener, producer }), names, 24);
  await Promise.all([producer, listener, claimer].map((c) => c.end()));
  await dropDatabase(server, 'bench_message_parts');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
