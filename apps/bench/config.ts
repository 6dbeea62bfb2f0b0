/**
 * The benchmark's parameters: JOBS, CONCURRENCY, LATENCY_SAMPLES, ROUNDS, HISTORY, PROCESSES,
 * SCALE, BACKLOG, POOLER, SUSTAINED, SUSTAINED_S and SUSTAINED_STEPS, from the command line (`JOBS=2000`, `--jobs=2000` or `--jobs 2000`; `--scale`
 * alone is SCALE=1) or else from the environment.
 */
export interface BenchConfig {
  /** Jobs per bulk add and per drain. */
  jobs: number;
  /** How many times every line is measured, the systems taking turns; the report gives the median. */
  rounds: number;
  /** Jobs run at once by each worker. */
  concurrency: number;
  /** add() → handler start measurements per worker mode. */
  latencySamples: number;
  /** Completed jobs put in finished_jobs before our drain with a history; 0 skips that drain. */
  history: number;
  /** The worker-process lines drain JOBS jobs with 1, 2, … up to this many worker processes; 0 skips them. */
  processes: number;
  /** SCALE=1: the long scale line too, a backlog of `backlog` jobs drained by one worker process. */
  scale: boolean;
  /** Jobs in the backlog line (only with SCALE=1). */
  backlog: number;
  /** The pooler lines (pooler.ts): our drain through PgBouncer against it straight to PostgreSQL, when PgBouncer is installed. POOLER=0 skips them. */
  pooler: boolean;
  /** Jobs added one at a time by each system: a tenth of `jobs`, since each is a round trip. */
  addOneJobs: number;
  /** The add-one-at-a-time phase runs each system's addOneJobs in this many slices, interleaved with the others' (adds-interleaved.ts). */
  addOneSlices: number;
  /** Jobs per addMany() / addJobs() call. */
  chunkSize: number;
  /** The same poll interval for both workers (ms). */
  pollInterval: number;
  /** The same pg pool size for both workers: one connection per running job, plus LISTEN and a spare. */
  poolSize: number;
  /** graphile-worker's batched mode: how many jobs its local queue fetches and locks at once. */
  localQueueSize: number;
  /** The SQL-limit line: plain node-pg clients looping claim + complete at once. */
  sqlClients: number;
  /** The SQL-limit line: jobs per claim. */
  sqlBatchSize: number;
  /** SUSTAINED=1: the sustained lines too (sustained.ts). */
  sustained: boolean;
  /** Seconds each step of the sustained lines lasts. */
  sustainedSeconds: number;
  /** The sustained lines' offered rates, in % of our capacity (sustained.ts). */
  sustainedSteps: number[];
}

/** Bad parameters: reported without a stack trace. */
export class UsageError extends Error {}

const PARAMETERS = ['JOBS', 'CONCURRENCY', 'LATENCY_SAMPLES', 'ROUNDS', 'HISTORY', 'PROCESSES', 'SCALE', 'BACKLOG', 'POOLER', 'SUSTAINED', 'SUSTAINED_S', 'SUSTAINED_STEPS'] as const;
type Parameter = (typeof PARAMETERS)[number];
/** On/off parameters: `--scale` alone turns one on. */
const SWITCHES: readonly Parameter[] = ['SCALE', 'POOLER', 'SUSTAINED'];

export function readBenchConfig(argv: string[], env: NodeJS.ProcessEnv): BenchConfig {
  const args = parseArgs(argv);
  const read = (name: Parameter, fallback: number, min = 1) => integer(name, args[name] ?? env[name], fallback, min);
  // The defaults take about a minute per round on a 2-CPU VM with fsync on, plus half a minute
  // loading the history: five minutes or so in all.
  const jobs = read('JOBS', 20_000);
  const concurrency = read('CONCURRENCY', 10);
  return {
    jobs,
    rounds: read('ROUNDS', 3),
    concurrency,
    // p99 of 1,000 samples is the 10th worst: steadier than the 3rd worst of 300.
    latencySamples: read('LATENCY_SAMPLES', 1000),
    // A day of completed jobs at about 12 a second, kept by the default retention (24 h).
    history: read('HISTORY', 1_000_000, 0),
    // The lines for 1, 2 and 3 processes take about ten seconds a round at the defaults.
    processes: read('PROCESSES', 3, 0),
    scale: switchOn('SCALE', args.SCALE ?? env.SCALE),
    // Fifty times the JOBS drain it is compared with.
    backlog: read('BACKLOG', 1_000_000),
    // On by default: three more drains a round, about ten seconds at the defaults; skipped where PgBouncer is not installed.
    pooler: switchOn('POOLER', args.POOLER ?? env.POOLER ?? '1'),
    addOneJobs: Math.max(1, Math.ceil(jobs / 10)),
    // About 95 adds a slice at the default JOBS: a few hundred ms, shorter than the disk's drifts;
    // a multiple of the three systems, so that each goes first, second and third equally often.
    addOneSlices: 21,
    chunkSize: 1000,
    pollInterval: 1000,
    // What the worker asks for (QUEUE_OWN_CONNECTIONS in worker/pool-size.ts): LISTEN, claims, releases.
    poolSize: concurrency + 3,
    // graphile's docs suggest concurrency + 1 as a start and much more for very fast tasks;
    // do-nothing tasks are as fast as it gets, and its drain keeps improving up to about this.
    localQueueSize: concurrency * 20,
    // Our worker has a claim and a release in flight at once: two connections busy, as here.
    sqlClients: 2,
    // The most our worker holds claimed beyond its running jobs (MAX_FACTOR × concurrency in prefetch.ts).
    sqlBatchSize: concurrency * 50,
    sustained: switchOn('SUSTAINED', args.SUSTAINED ?? env.SUSTAINED),
    // A minute a step: three steps and three systems, about eleven minutes a round with the warm-ups.
    sustainedSeconds: read('SUSTAINED_S', 60),
    sustainedSteps: percentages(args.SUSTAINED_STEPS ?? env.SUSTAINED_STEPS, [25, 50, 75]),
  };
}

function parseArgs(argv: string[]): Partial<Record<Parameter, string>> {
  const args: Partial<Record<Parameter, string>> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const assignment = /^(?:--)?([A-Za-z_-]+)=(.*)$/.exec(arg);
    const flag = /^--([A-Za-z_-]+)$/.exec(arg);
    const name = assignment?.[1] ?? flag?.[1] ?? arg;
    const key = name.replace(/-/g, '_').toUpperCase();
    const isSwitch = (SWITCHES as readonly string[]).includes(key);
    const value = assignment ? assignment[2] : flag ? (isSwitch ? '1' : argv[++i]) : undefined;
    if (!(PARAMETERS as readonly string[]).includes(key) || value === undefined) {
      throw new UsageError(`bad argument "${arg}": use ${PARAMETERS.map((p) => `${p}=<n>`).join(', ')} or --scale, --sustained`);
    }
    args[key as Parameter] = value;
  }
  return args;
}

function switchOn(name: Parameter, raw: string | undefined): boolean {
  if (raw === undefined || raw === '' || raw === '0') return false;
  if (raw === '1') return true;
  throw new UsageError(`${name} must be 0 or 1, got "${raw}"`);
}

/** A comma-separated list of percentages, increasing (`SUSTAINED_STEPS=25,50,75`). */
function percentages(raw: string | undefined, fallback: number[]): number[] {
  if (raw === undefined || raw === '') return fallback;
  const values = raw.split(',').map((part) => Number(part.trim()));
  if (values.some((v, i) => !(v > 0 && v <= 1000) || (i > 0 && v <= values[i - 1]))) {
    throw new UsageError(`SUSTAINED_STEPS must be increasing percentages between 0 and 1000, separated by commas, got "${raw}"`);
  }
  return values;
}

function integer(name: string, raw: string | undefined, fallback: number, min: number): number {
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < min) {
    throw new UsageError(`${name} must be ${min === 0 ? 'a non-negative' : 'a positive'} integer, got "${raw}"`);
  }
  return value;
}
