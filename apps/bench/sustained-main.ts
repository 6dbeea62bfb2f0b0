/**
 * `npm run bench:sustained`: the sustained lines alone (sustained.ts), ROUNDS rounds, on the
 * bench's server (DATABASE_URL, or an embedded one started durable). SUSTAINED_SYSTEMS narrows
 * the systems (ours always runs: its capacity is the base of the rates), e.g. for the long run
 * `SUSTAINED_SYSTEMS=nestjs-job-queue SUSTAINED_S=1800 SUSTAINED_STEPS=50 ROUNDS=1`.
 */
import 'reflect-metadata';
import { readBenchConfig, UsageError } from './config';
import { dropDatabase, openPostgresServer, readServerSettings } from './database';
import { printSustained } from './report-sustained';
import { runSustained, type SustainedResult } from './sustained';
import { SUSTAINED_PLOT, writeSustainedPlot } from './sustained-plot';
import { SUSTAINED_SYSTEMS, type SustainedSystem } from './sustained-process';

const DATABASE = 'bench_sustained';
const progress = (message: string) => console.error(`[bench] ${message}`);

async function main(): Promise<void> {
  const config = readBenchConfig(process.argv.slice(2), process.env);
  const only = systems(process.env.SUSTAINED_SYSTEMS);
  const server = await openPostgresServer();
  try {
    const settings = await readServerSettings(server.url);
    if (settings.fsync !== 'on') throw new UsageError(`fsync is ${settings.fsync} on ${server.description}: the benchmark needs fsync on`);
    console.log(`server: ${server.description}; PostgreSQL ${settings.version}, fsync=${settings.fsync}, synchronous_commit=${settings.synchronousCommit}`);
    console.log(`settings: CONCURRENCY=${config.concurrency} JOBS=${config.jobs} ROUNDS=${config.rounds} SUSTAINED_S=${config.sustainedSeconds} SUSTAINED_STEPS=${config.sustainedSteps.join(',')}`);
    const rounds: SustainedResult[] = [];
    for (let round = 1; round <= config.rounds; round++) {
      rounds.push(await runSustained(server.url, DATABASE, config, (message) => progress(`round ${round}/${config.rounds}: ${message}`), only));
    }
    console.log('');
    printSustained(rounds);
    writeSustainedPlot(rounds[rounds.length - 1], config.sustainedSeconds, SUSTAINED_PLOT);
    progress(`the last round is plotted in ${SUSTAINED_PLOT}`);
  } finally {
    await dropDatabase(server.url, DATABASE).catch(() => undefined);
    await server.stop();
  }
}

function systems(raw: string | undefined): SustainedSystem[] {
  if (!raw) return [...SUSTAINED_SYSTEMS];
  const named = raw.split(',').map((s) => s.trim());
  const unknown = named.filter((s) => !(SUSTAINED_SYSTEMS as readonly string[]).includes(s));
  if (unknown.length > 0) throw new UsageError(`SUSTAINED_SYSTEMS: unknown ${unknown.join(', ')}; the systems are ${SUSTAINED_SYSTEMS.join(', ')}`);
  return named as SustainedSystem[];
}

main().then(
  () => setTimeout(() => process.exit(0), 1000).unref(),
  (error: unknown) => {
    console.error('[bench] failed:', error instanceof UsageError ? error.message : error);
    process.exitCode = 1;
    setTimeout(() => process.exit(1), 1000).unref();
  },
);
