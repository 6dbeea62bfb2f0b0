// Run after `npm run build`, the builds to compare built as for drain-ab.cjs:
//   SERVER_URL=postgres://postgres@127.0.0.1:5432/postgres BUILDS=before=/tmp/ab-9ca3c3e,after=/tmp/ab-main \
//     [SETUP_<label>="<sql>"] [CYCLES=200] [BATCH=250] node apps/bench/probes/release-ab.cjs
// The drain's two statements at the SQL level, for two or more builds: each build's schema (its
// migrations) on a database of its own, each build's own claimJobs and releaseJobs texts, run
// prepared on plain node-pg clients as sql-limit.ts runs them (claim on a connection with the
// claim settings, release with keep-completed on). CYCLES cycles, the builds' order rotated
// cycle by cycle, each claiming BATCH jobs and releasing them as completed; the release and the
// claim are timed one by one (round trip included). SETUP_<label>: a statement run on that
// build's database first (say, dropping a trigger). Prints the median and p90 of each, and the
// medians against the first build's.
const { join } = require('path');
const { Client } = require('pg');

const serverUrl = process.env.SERVER_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const CYCLES = +(process.env.CYCLES || 200);
const BATCH = +(process.env.BATCH || 250);
const BUILDS = (process.env.BUILDS || `this=${join(__dirname, '../../..')}`).split(',').map((spec) => {
  const [label, dir] = spec.split('=');
  const lib = join(dir, 'dist/libs/job-queue/src');
  const bench = join(dir, 'dist/apps/bench');
  const { SCHEMA, TASK, insertJobs } = require(join(bench, 'jobs-table'));
  return {
    label,
    sql: require(join(lib, 'sql/queries')).createQueries(SCHEMA),
    claimSettings: require(join(lib, 'worker/claim-connection')).CLAIM_SESSION_SETTINGS,
    releaseParameters: require(join(lib, 'worker/release-parameters')).releaseParameters,
    createSchema: require(join(bench, 'sql-limit')).createSchema,
    database: require(join(bench, 'database')),
    TASK,
    insertJobs,
    setup: process.env[`SETUP_${label}`],
    db: `bench_release_ab_${label}`,
    times: { claim: [], release: [] },
  };
});

const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const p90 = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length * 0.9)];

async function open(build) {
  const url = await build.database.recreateDatabase(serverUrl, build.db);
  await build.createSchema(url);
  build.client = new Client({ connectionString: url });
  build.claimClient = new Client({ connectionString: url });
  await build.client.connect();
  await build.claimClient.connect();
  await build.claimClient.query(build.claimSettings);
  if (build.setup) await build.client.query(build.setup);
  await build.insertJobs(build.client, (CYCLES + 5) * BATCH);
  await build.client.query('vacuum analyze job_queue.jobs');
  await build.client.query({ name: 'register', text: build.sql.registerWorker, values: ['release-ab', 600_000, null, null, null] });
}

async function cycle(build, counted) {
  let t = performance.now();
  const claimed = await build.claimClient.query({ name: 'claim', text: build.sql.claimJobs, values: [[build.TASK], [], BATCH, 'release-ab', BATCH, []].slice(0, build.sql.claimJobs.includes('$6') ? 6 : 5) });
  const claimMs = performance.now() - t;
  const ids = claimed.rows.map((row) => row.id);
  if (ids.length !== BATCH) throw new Error(`${build.label}: claimed ${ids.length} of ${BATCH}`);
  const values = build.releaseParameters('release-ab', { completed: ids.map((id) => ({ id, result: null })), failed: [], started: [], progress: new Map() }, true);
  t = performance.now();
  const released = await build.client.query({ name: 'release', text: build.sql.releaseJobs, values });
  const releaseMs = performance.now() - t;
  if (released.rows[0].released !== BATCH) throw new Error(`${build.label}: released ${released.rows[0].released} of ${BATCH}`);
  if (counted) {
    build.times.claim.push(claimMs);
    build.times.release.push(releaseMs);
  }
}

(async () => {
  try {
    for (const build of BUILDS) await open(build);
    for (let i = 0; i < CYCLES + 5; i++) {
      for (let j = 0; j < BUILDS.length; j++) await cycle(BUILDS[(i + j) % BUILDS.length], i >= 5); // five uncounted cycles first
    }
    const base = BUILDS[0].times;
    console.log(`CYCLES=${CYCLES} BATCH=${BATCH}`);
    for (const { label, times, setup } of BUILDS) {
      const line = (k) => `${k} median ${median(times[k]).toFixed(2)} ms, p90 ${p90(times[k]).toFixed(2)} ms (${((100 * median(times[k])) / median(base[k])).toFixed(1)} %)`;
      console.log(`${label.padEnd(10)} ${line('release')}; ${line('claim')}${setup ? `  [${setup}]` : ''}`);
    }
  } finally {
    for (const build of BUILDS) {
      await build.client?.end().catch(() => undefined);
      await build.claimClient?.end().catch(() => undefined);
      await build.database.dropDatabase(serverUrl, build.db).catch(() => undefined);
    }
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
