/**
 * Worker processes for fault tests: each runs the test app of worker-process.ts in a child
 * process of its own, which a test can SIGKILL, SIGSTOP, SIGCONT or SIGTERM. A child that
 * exits without being told to is a crash: every wait of the test fails at once with its
 * output (see wait.ts), and so does stopWorkerProcesses() in the test's `after`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { clearCrashes, reportCrash, waitFor } from './wait';

export interface WorkerProcessOptions {
  /** The test database. */
  url: string;
  /** Jobs run at once by the worker (default 4). */
  concurrency?: number;
  /** More environment for the child (see worker-process.ts for what it reads). */
  env?: Record<string, string>;
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

const live = new Set<WorkerProcess>();
const crashes: string[] = [];

export class WorkerProcess {
  readonly child: ChildProcess;
  /** Everything the child wrote, stdout and stderr interleaved. */
  output = '';
  readonly exited: Promise<Exit>;
  private told = false;

  constructor(readonly index: number, options: WorkerProcessOptions) {
    this.child = spawn(process.execPath, [join(__dirname, 'worker-process.js')], {
      env: { ...process.env, DATABASE_URL: options.url, CONCURRENCY: String(options.concurrency ?? 4), ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child.stdout!.on('data', (chunk) => (this.output += chunk));
    this.child.stderr!.on('data', (chunk) => (this.output += chunk));
    live.add(this);
    this.exited = new Promise((resolve) => {
      // 'close', not 'exit': by then everything the child wrote has been read into `output`
      this.child.on('close', (code, signal) => {
        live.delete(this);
        if (!this.told) {
          const report = `worker process #${index} (pid ${this.child.pid}) exited by itself (code ${code}, signal ${signal}); its output:\n${this.output}`;
          crashes.push(report);
          reportCrash(new Error(report));
        }
        resolve({ code, signal });
      });
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** The worker id it registered under, once it has printed `ready`. */
  get workerId(): string | undefined {
    return /^ready (\S+)$/m.exec(this.output)?.[1];
  }

  /** Sends `signal`; SIGKILL and SIGTERM are expected to end it, so its exit is no crash. */
  signal(signal: NodeJS.Signals): void {
    if (signal === 'SIGKILL' || signal === 'SIGTERM' || signal === 'SIGINT') this.told = true;
    this.child.kill(signal);
  }

  /** SIGKILL, as the OOM killer or a lost container does; resolves when it is gone. */
  async kill(): Promise<Exit> {
    this.signal('SIGKILL');
    return this.exited;
  }

  /** SIGSTOP: the process freezes (a long GC pause, a stalled VM) until resume(). */
  pause(): void {
    this.signal('SIGSTOP');
  }

  resume(): void {
    this.signal('SIGCONT');
  }

  /** SIGTERM, as an orchestrator stops a replica; resolves when it has exited. */
  async terminate(): Promise<Exit> {
    this.signal('SIGTERM');
    return this.exited;
  }

  /** Resolves when the child has printed something matching `pattern`. */
  async waitForOutput(what: string, pattern: RegExp): Promise<void> {
    await waitFor(() => `worker process #${this.index} to print ${what}; it printed:\n${this.output}`, () => pattern.test(this.output));
  }
}

/** Starts `count` worker processes and resolves once every one has booted and started its worker. */
export async function startWorkerProcesses(count: number, options: WorkerProcessOptions): Promise<WorkerProcess[]> {
  const processes = Array.from({ length: count }, (_, i) => new WorkerProcess(i + 1, options));
  await Promise.all(processes.map((p) => p.waitForOutput('ready', /^ready \S+$/m)));
  return processes;
}

/**
 * For a test's `after`: kills every worker process still running (a stopped one too), and
 * fails if any of them crashed since the last call.
 */
export async function stopWorkerProcesses(): Promise<void> {
  await Promise.all([...live].map((p) => p.kill()));
  const reports = crashes.splice(0);
  clearCrashes();
  if (reports.length > 0) throw new Error(reports.join('\n\n'));
}
