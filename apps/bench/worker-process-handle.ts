import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchConfig } from './config';
import type { MemorySample, WorkerProcessMessage, WorkerProcessRequest } from './worker-process';

type Command = WorkerProcessRequest['command'];
type Pending = { resolve: (value: unknown) => void; reject: (error: Error) => void };

/** The bench's side of one worker process (worker-process.ts): its requests, and the progress it last reported. */
export class WorkerProcess {
  /** Handlers started in this process since its last start(), and when the latest did (epoch ms). */
  started = 0;
  lastStartAt = 0;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private exited?: Error;

  private constructor(
    private readonly child: ChildProcess,
    readonly label: string,
  ) {
    child.on('message', (message: WorkerProcessMessage) => this.receive(message));
    child.on('exit', (code, signal) => {
      this.exited = new Error(`${label} exited (${signal ?? `code ${code}`})`);
      for (const waiter of this.pending.values()) waiter.reject(this.exited);
      this.pending.clear();
    });
  }

  /**
   * Forks the compiled worker-process.js beside this file and opens its app on `url`. The
   * database's schema must exist: the bench's own app made it, so that no two processes migrate.
   */
  static async open(url: string, config: BenchConfig, label: string): Promise<WorkerProcess> {
    const child = fork(join(__dirname, 'worker-process.js'), [], {
      // gc() before reading memory; the child's stdout goes to stderr, away from the report.
      execArgv: [...process.execArgv, '--expose-gc'],
      stdio: ['ignore', 2, 2, 'ipc'],
    });
    const handle = new WorkerProcess(child, label);
    try {
      await handle.call('open', { url, config });
    } catch (error) {
      child.kill();
      throw error;
    }
    return handle;
  }

  /** The "go": the worker starts claiming. */
  start(): Promise<unknown> {
    this.started = 0;
    this.lastStartAt = 0;
    return this.call('start');
  }

  /** Stops the worker (every completion written): how many handlers it started since start(). */
  async stop(): Promise<number> {
    return (await this.call('stop')) as number;
  }

  memory(): Promise<MemorySample> {
    return this.call('memory') as Promise<MemorySample>;
  }

  /** Stops the worker and closes the app; the process then exits, or is killed if it has not within 15 s. */
  async close(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<boolean>((resolve) => this.child.once('exit', () => resolve(true)));
    this.call('close').catch(() => undefined); // its reply races the exit; the exit is what counts
    if (!(await Promise.race([gone, sleep(15_000, false)]))) this.child.kill('SIGKILL');
  }

  private call(command: Command, fields: object = {}): Promise<unknown> {
    if (this.exited) return Promise.reject(this.exited);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.send({ id, command, ...fields });
    });
  }

  private receive(message: WorkerProcessMessage): void {
    if (message.type === 'progress') {
      this.started = message.started;
      this.lastStartAt = message.lastStartAt;
      return;
    }
    const waiter = this.pending.get(message.id);
    this.pending.delete(message.id);
    if (message.error !== undefined) waiter?.reject(new Error(`${this.label}: ${message.error}`));
    else waiter?.resolve(message.value);
  }
}
