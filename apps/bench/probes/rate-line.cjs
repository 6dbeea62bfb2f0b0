// Run after `npm run build`, from the repository:
//   SERVER_URL=postgres://postgres@127.0.0.1:5432/postgres [ROUNDS=3] [JOBS=20000] node apps/bench/probes/rate-line.cjs
// The bench's limit lines alone (apps/bench/limits.ts), as `npm run bench` measures them: the
// bench's three worker processes (concurrency 10, pollInterval 1000 ms) on a fresh database of
// SERVER_URL's server, warmed up, then ROUNDS times the globalConcurrency line and the rate line
// (10,000 jobs at 1,000 a second), each printed.
const { join } = require('path');
const bench = join(__dirname, '../../../dist/apps/bench');
const { readBenchConfig } = require(join(bench, 'config'));
const { recreateDatabase, dropDatabase } = require(join(bench, 'database'));
const { openApp } = require(join(bench, 'system-nestjs-job-queue'));
const { WorkerProcess } = require(join(bench, 'worker-process-handle'));
const { measureLimitLines, LIMIT_PROCESSES } = require(join(bench, 'limits'));
const { drainAcross } = require(join(bench, 'process-drain'));
const { settleJobsTable } = require(join(bench, 'jobs-table'));
const { addInChunks } = require(join(bench, 'suite'));

(async () => {
  const config = readBenchConfig([], process.env);
  const serverUrl = process.env.SERVER_URL;
  if (!serverUrl) throw new Error('SERVER_URL is required');
  const url = await recreateDatabase(serverUrl, 'jq_rate_line');
  const app = await openApp(url, config);
  const processes = await Promise.all(Array.from({ length: LIMIT_PROCESSES }, (_, i) => WorkerProcess.open(url, config, `worker process ${i + 1}`)));
  const addAndDrain = async (app, by, count) => {
    await settleJobsTable(app.dataSource);
    await addInChunks(app, count, config.chunkSize);
    return drainAcross(app, by, count);
  };
  try {
    await addAndDrain(app, processes, 2000);
    for (let round = 1; round <= config.rounds; round++) {
      const { concurrency, rate } = await measureLimitLines(app, processes, config, () => undefined, addAndDrain);
      console.log(`round ${round}: globalConcurrency ${Math.round(concurrency.perSecond ?? 0)} jobs/s; rate: most in a window ${rate.mostInWindow}, used ${rate.usedPercent.toFixed(1)} %`);
    }
  } finally {
    await Promise.all(processes.map((p) => p.close()));
    await app.close();
    await dropDatabase(serverUrl, 'jq_rate_line');
  }
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
