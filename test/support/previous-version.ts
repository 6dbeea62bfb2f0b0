/**
 * A previous version of the library, for upgrade tests: the package as it was at commit
 * PREVIOUS_VERSION (or FIRST_RELEASE, LIFECYCLE_VERSION, … LIMITS_VERSION below), packed into test/fixtures/nestjs-job-queue-<commit>.tgz by
 * test/fixtures/pack-previous-version.sh and kept in the repository, installed into an app
 * folder of its own without the network; and worker processes of the app
 * test/fixtures/old-worker.js running on it (see that file for its tasks and commands).
 * Like worker-processes.ts: a child that exits without being told to is a crash, and every
 * wait of the test fails at once with its output (wait.ts); stopOldWorkers() reports it too.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { clearCrashes, reportCrash, waitFor } from './wait';
import type { Exit } from './worker-processes';

/**
 * 0.1.0, the first release: the last commit before migration RecoveryAndQueueOrder1763800000000
 * (it has CreateJobTables1763700000000 only). Its workers heartbeat every 10 s, have no
 * timeout of their own, never record that a job started, and do not fence themselves.
 */
export const FIRST_RELEASE = '0d7d0f2';
/** The last commit before migration JobLifecycle1763900000000 (it has CreateJobTables1763700000000 and RecoveryAndQueueOrder1763800000000). */
export const PREVIOUS_VERSION = 'be5c87e';
/** The last commit before migration Operations1764000000000 (it also has JobLifecycle1763900000000). */
export const LIFECYCLE_VERSION = '38ce51d';
/** The last commit before migration ClaimByQueueHeads1764100000000 (it also has Operations1764000000000). */
export const OPERATIONS_VERSION = 'f2489f6';
/** The last commit before migration EventListeners1764200000000 (it also has ClaimByQueueHeads1764100000000). */
export const QUEUE_HEADS_VERSION = '6521d3b';
/** The last commit before migrations Flows1764300000000 and JobStepsAndBatches1764400000000 (it also has EventListeners1764200000000). */
export const EVENTS_VERSION = '9ca3c3e';
/** The last commit before migration JobCounts1764500000000 (it also has Flows1764300000000 and JobStepsAndBatches1764400000000). */
export const FLOWS_VERSION = '1572e48';
/** The last commit before migration TaskLimits1764800000000 (it has every migration through Schedules1764700000000). */
export const SCHEDULES_VERSION = '55a4e3d';
/** The last commit before migration JobGroups1764900000000 (it has every migration through TaskLimits1764800000000). */
export const LIMITS_VERSION = '3209aae';
/** The last commit before migration TaskFetchIndex1765000000000 (it has every migration through JobGroups1764900000000). */
export const GROUPS_VERSION = 'd34684f';
/** The last commit before migration JobsVacuumTruncate1765100000000 (it has every migration through TaskFetchIndex1765000000000). */
export const TASK_FETCH_VERSION = 'fab88a8';
/** The last commit before migration FlowAddOnce1765200000000 (it has every migration through JobsVacuumTruncate1765100000000). */
export const VACUUM_TRUNCATE_VERSION = 'c08b82e';
/** The last commit before migration FlowSettleLinear1765300000000 (it has every migration through FlowAddOnce1765200000000). */
export const FLOW_ADD_ONCE_VERSION = '7f03fc7';
/** The last commit before migration FlowRetryKeepsFailures1765400000000 (it has every migration through FlowSettleLinear1765300000000). */
export const FLOW_SETTLE_LINEAR_VERSION = 'bf115f1';
/** The release before migration FlowEdgeStatistics1765500000000 and the release without JIT (the main of the sixteenth session; it has every migration through FlowRetryKeepsFailures1765400000000). */
export const FLOW_RETRY_VERSION = 'ff92997';
/** The migrations FLOWS_VERSION knows, as its library lists them. */
export const FLOWS_VERSION_MIGRATIONS: readonly string[] = [
  'CreateJobTables1763700000000',
  'RecoveryAndQueueOrder1763800000000',
  'JobLifecycle1763900000000',
  'Operations1764000000000',
  'ClaimByQueueHeads1764100000000',
  'EventListeners1764200000000',
  'Flows1764300000000',
  'JobStepsAndBatches1764400000000',
];

const root = resolve(__dirname, '..', '..', '..'); // dist/test/support → the repository
const fixtures = join(root, 'test', 'fixtures');

export interface PreviousVersionApp {
  /** The app folder: old-worker.js, and node_modules with the old nestjs-job-queue in it. */
  dir: string;
  remove(): void;
}

/**
 * Makes an app folder in the temp dir with the old package unpacked as
 * node_modules/nestjs-job-queue (the tarball's top folder is `package/`), and every other
 * entry of the repository's node_modules linked beside it, so that the old library loads
 * the same @nestjs/*, typeorm, pg and cron as the new code, as one deployed app would.
 */
export function installPreviousVersion(version = PREVIOUS_VERSION): PreviousVersionApp {
  const dir = mkdtempSync(join(tmpdir(), `jq-previous-${version}-`));
  try {
    const modules = join(dir, 'node_modules');
    const pkg = join(modules, 'nestjs-job-queue');
    mkdirSync(pkg, { recursive: true });
    const tarball = join(fixtures, `nestjs-job-queue-${version}.tgz`);
    const tar = spawnSync('tar', ['-xzf', tarball, '-C', pkg, '--strip-components=1'], { encoding: 'utf8' });
    if (tar.status !== 0) throw new Error(`could not unpack ${tarball}: ${tar.error?.message ?? tar.stderr}`);
    for (const entry of readdirSync(join(root, 'node_modules'))) {
      if (entry !== 'nestjs-job-queue') symlinkSync(join(root, 'node_modules', entry), join(modules, entry));
    }
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'previous-version-app', private: true, type: 'commonjs' }));
    copyFileSync(join(fixtures, 'old-worker.js'), join(dir, 'old-worker.js'));
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

const live = new Set<OldWorkerProcess>();
const crashes: string[] = [];

/** A process of old-worker.js: a worker app on the previous version. */
export class OldWorkerProcess {
  readonly child: ChildProcess;
  /** Everything the child wrote, stdout and stderr interleaved. */
  output = '';
  readonly exited: Promise<Exit>;
  private told = false;

  private constructor(app: PreviousVersionApp, url: string, env: Record<string, string>) {
    this.child = spawn(process.execPath, [join(app.dir, 'old-worker.js')], {
      cwd: app.dir,
      env: { ...process.env, ...env, DATABASE_URL: url, NO_COLOR: '1' }, // Nest's log lines without colour codes, for the test's patterns
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.child.stdout!.on('data', (chunk) => (this.output += chunk));
    this.child.stderr!.on('data', (chunk) => (this.output += chunk));
    this.child.stdin!.on('error', () => undefined); // writing to a child that just died
    live.add(this);
    this.exited = new Promise((resolve) => {
      this.child.on('close', (code, signal) => {
        live.delete(this);
        if (!this.told) {
          const report = `the old worker (pid ${this.child.pid}) exited by itself (code ${code}, signal ${signal}); its output:\n${this.output}`;
          crashes.push(report);
          reportCrash(new Error(report));
        }
        resolve({ code, signal });
      });
    });
  }

  /**
   * Starts one and resolves once its worker has started (and so its migrations have run, and
   * its schedules are registered). `env`: more of old-worker.js's environment (OLD_WORKER_CRON).
   */
  static async start(app: PreviousVersionApp, url: string, env: Record<string, string> = {}): Promise<OldWorkerProcess> {
    const worker = new OldWorkerProcess(app, url, env);
    await worker.waitForOutput('ready', /^ready \S+$/m);
    return worker;
  }

  get pid(): number {
    return this.child.pid!;
  }

  get workerId(): string | undefined {
    return /^ready (\S+)$/m.exec(this.output)?.[1];
  }

  /** Where `nestjs-job-queue` resolved from in the child, and the migrations that version has. */
  get library(): { path: string; migrations: string[] } | undefined {
    const match = /^library (\S+) (\S*)$/m.exec(this.output);
    return match ? { path: match[1], migrations: match[2].split(',').filter(Boolean) } : undefined;
  }

  private commands = 0;

  /**
   * Adds jobs through the child's own JobQueueService (`add()` each, at once, or one
   * `addMany()`), and resolves with their ids. `runAt` may be given as an ISO string.
   */
  async add(specs: Array<{ identifier: string; payload?: unknown; [spec: string]: unknown }>, { many = false } = {}): Promise<string[]> {
    return this.command({ add: specs, many });
  }

  /** Adds a flow through the child's own JobQueueService (`addFlow()`: versions with flows), and resolves with its id. */
  async addFlow(steps: Array<{ ref: string; identifier: string; payload?: unknown; dependsOn?: string[]; [spec: string]: unknown }>): Promise<string> {
    const [flowId] = await this.command({ flow: steps });
    return flowId;
  }

  /** Sends an adding command (old-worker.js) and resolves with the ids it printed. */
  private async command(command: object): Promise<string[]> {
    const tag = `c${++this.commands}`;
    this.child.stdin!.write(`${JSON.stringify({ tag, ...command })}\n`);
    const added = new RegExp(`^added ${tag} (\\[.*\\])$`, 'm');
    const failed = new RegExp(`^add failed ${tag}:`, 'm');
    await this.waitForOutput(`the jobs of command ${tag} to be added`, () => added.test(this.output) || failed.test(this.output));
    const match = added.exec(this.output);
    if (!match) throw new Error(`the old worker could not add the jobs of command ${tag}; its output:\n${this.output}`);
    return JSON.parse(match[1]) as string[];
  }

  /** Opens gate `gate` of the `hold` jobs (old-worker.js), those waiting and those to come; resolves once the child has. */
  async open(gate: string): Promise<void> {
    const tag = `c${++this.commands}`;
    this.child.stdin!.write(`${JSON.stringify({ tag, open: gate })}\n`);
    await this.waitForOutput(`gate ${gate} to open (command ${tag})`, new RegExp(`^opened ${tag}$`, 'm'));
  }

  /** SIGSTOP: the process freezes (a stall: a long GC pause, a frozen VM), its connections stay open. */
  pause(): void {
    this.child.kill('SIGSTOP');
  }

  /** SIGCONT: a paused process goes on where it stopped. */
  resume(): void {
    this.child.kill('SIGCONT');
  }

  /** SIGTERM, as an orchestrator stops a replica; resolves when it has exited. */
  async terminate(): Promise<Exit> {
    this.told = true;
    this.child.kill('SIGTERM');
    return this.exited;
  }

  async kill(): Promise<Exit> {
    this.told = true;
    this.child.kill('SIGKILL');
    return this.exited;
  }

  /** Resolves when the child has printed something matching `pattern`. */
  async waitForOutput(what: string, pattern: RegExp | (() => boolean)): Promise<void> {
    const matches = typeof pattern === 'function' ? pattern : () => pattern.test(this.output);
    await waitFor(() => `the old worker to print ${what}; it printed:\n${this.output}`, matches);
  }
}

/** For a test's `after`/`afterEach`: kills every old worker still running, and fails if any of them crashed. */
export async function stopOldWorkers(): Promise<void> {
  await Promise.all([...live].map((worker) => worker.kill()));
  const reports = crashes.splice(0);
  clearCrashes();
  if (reports.length > 0) throw new Error(reports.join('\n\n'));
}
