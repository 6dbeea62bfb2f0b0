import type { BenchConfig } from './config';
import { IpcChild } from './ipc-child';
import type { MemorySample, WorkerProcessMessage } from './worker-process';

/** The bench's side of one worker process (worker-process.ts): its requests, and the progress it last reported. */
export class WorkerProcess {
  /** Handlers started in this process since its last start(), and when the latest did (epoch ms). */
  started = 0;
  lastStartAt = 0;
  private readonly child: IpcChild<WorkerProcessMessage>;

  private constructor(readonly label: string) {
    this.child = IpcChild.fork<WorkerProcessMessage>('worker-process.js', label, (message) => {
      this.started = message.started;
      this.lastStartAt = message.lastStartAt;
    });
  }

  /**
   * Forks the compiled worker-process.js beside this file and opens its app on `url`. The
   * database's schema must exist: the bench's own app made it, so that no two processes migrate.
   */
  static async open(url: string, config: BenchConfig, label: string): Promise<WorkerProcess> {
    const handle = new WorkerProcess(label);
    try {
      await handle.child.call('open', { url, config });
    } catch (error) {
      handle.child.kill();
      throw error;
    }
    return handle;
  }

  /** The "go": the worker starts claiming. */
  start(): Promise<unknown> {
    this.started = 0;
    this.lastStartAt = 0;
    return this.child.call('start');
  }

  /** Stops the worker (every completion written): how many handlers it started since start(). */
  async stop(): Promise<number> {
    return (await this.child.call('stop')) as number;
  }

  memory(): Promise<MemorySample> {
    return this.child.call('memory') as Promise<MemorySample>;
  }

  /** Stops the worker and closes the app; the process then exits, or is killed if it has not within 15 s. */
  close(): Promise<void> {
    return this.child.close();
  }
}
