// Run after `npm run build`, with each build to compare built in a folder of its own (as for drain-ab.cjs):
//   SERVER_URL=postgres://postgres@127.0.0.1:5432/postgres BUILDS=before=/tmp/ab-before,after=/tmp/ab-main \
//     [SLICES=20] [SLICE=250] [CHUNK=1000] node apps/bench/probes/add-ab.cjs
// add() one at a time (awaited, each its own commit) and addMany() in calls of CHUNK, for two or more
// builds in one process, each build's own `openApp` (apps/bench/system-nestjs-job-queue) on a database
// of its own (no worker running). The builds take turns slice by slice (SLICE single adds, then one
// addMany of CHUNK), the order rotated each slice, so that drift in the machine's load falls on all.
// Prints per build the adds/s of both kinds and the CPU its database's backends spent per job (from
// /proc: same machine only; less disturbed by other load than the rates), and against the first build
// the ratio of the totals. SETUP_<label>: a statement run on that build's database after its app
// opened (say, to drop a trigger), so that one build can be measured with and without something.
const fs = require('fs');
const { join } = require('path');
const { Client } = require('pg');

const serverUrl = process.env.SERVER_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const SLICES = +(process.env.SLICES || 20);
const SLICE = +(process.env.SLICE || 250);
const CHUNK = +(process.env.CHUNK || 1000);
const BUILDS = (process.env.BUILDS || `this=${join(__dirname, '../../..')}`).split(',').map((spec) => {
  const [label, dir] = spec.split('=');
  return { label, openApp: require(join(dir, 'dist/apps/bench/system-nestjs-job-queue')).openApp, setup: process.env[`SETUP_${label}`] };
});
const harness = join(__dirname, '../../../dist/apps/bench');
const { readBenchConfig } = require(join(harness, 'config'));
const { recreateDatabase, dropDatabase } = require(join(harness, 'database'));
const config = readBenchConfig([], process.env);

const cpuMs = (pid) => {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) * 10; // USER_HZ 100
  } catch {
    return 0;
  }
};
async function backendCpu(admin, db) {
  const pids = (await admin.query('select pid from pg_stat_activity where datname = $1', [db])).rows.map((r) => r.pid);
  return pids.reduce((sum, pid) => sum + cpuMs(pid), 0);
}

(async () => {
  const admin = new Client({ connectionString: serverUrl });
  await admin.connect();
  const opened = [];
  for (const [i, build] of BUILDS.entries()) {
    const db = `bench_add_ab_${i}`;
    const queue = await build.openApp(await recreateDatabase(serverUrl, db), config);
    if (build.setup) await queue.dataSource.query(build.setup);
    opened.push({ build, db, queue, one: 0, many: 0, index: 0, oneCpu: 0, manyCpu: 0 });
  }
  try {
    for (const o of opened) for (let k = 0; k < 50; k++) await o.queue.addOne(o.index++); // warm-up
    for (let s = 0; s < SLICES; s++) {
      for (let j = 0; j < opened.length; j++) {
        const o = opened[(s + j) % opened.length];
        let cpu = await backendCpu(admin, o.db);
        let started = performance.now();
        for (let k = 0; k < SLICE; k++) await o.queue.addOne(o.index++);
        o.one += performance.now() - started;
        o.oneCpu -= cpu - (cpu = await backendCpu(admin, o.db));
        started = performance.now();
        await o.queue.addMany(o.index, CHUNK);
        o.index += CHUNK;
        o.many += performance.now() - started;
        o.manyCpu += (await backendCpu(admin, o.db)) - cpu;
      }
    }
    const rate = (count, ms) => (count * 1000) / ms;
    const first = opened[0];
    for (const o of opened) {
      const one = rate(SLICES * SLICE, o.one);
      const many = rate(SLICES * CHUNK, o.many);
      console.log(
        `${o.build.label.padEnd(10)} add() ${Math.round(one)} jobs/s (${((100 * first.one) / o.one).toFixed(1)} % of ${first.build.label}), ` +
          `postgres ${((o.oneCpu * 1000) / (SLICES * SLICE)).toFixed(1)} µs/job; addMany() ${Math.round(many)} jobs/s (${((100 * first.many) / o.many).toFixed(1)} %), ` +
          `postgres ${((o.manyCpu * 1000) / (SLICES * CHUNK)).toFixed(1)} µs/job`,
      );
    }
  } finally {
    await admin.end();
    for (const o of opened) {
      await o.queue.close();
      await dropDatabase(serverUrl, o.db).catch(() => undefined);
    }
  }
  process.exit(0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
