import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

type Pending = { resolve: (value: unknown) => void; reject: (error: Error) => void };

/** What a bench child process sends: a reply to a request (by its id), or a message of its own. */
export type ChildMessage = { type: 'reply'; id: number; value?: unknown; error?: string } | { type: string; id?: undefined };

/**
 * The bench's side of one forked child process (worker-process.ts, sustained-process.ts):
 * requests over IPC answered by id, and the child's own messages handed to `onMessage`.
 */
export class IpcChild<Message extends { type: string }> {
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private exited?: Error;

  private constructor(
    private readonly child: ChildProcess,
    readonly label: string,
    onMessage: (message: Message) => void,
  ) {
    child.on('message', (message: ChildMessage) => {
      if (message.type !== 'reply') return onMessage(message as unknown as Message);
      const reply = message as Extract<ChildMessage, { type: 'reply' }>;
      const waiter = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      if (reply.error !== undefined) waiter?.reject(new Error(`${label}: ${reply.error}`));
      else waiter?.resolve(reply.value);
    });
    child.on('exit', (code, signal) => {
      this.exited = new Error(`${label} exited (${signal ?? `code ${code}`})`);
      for (const waiter of this.pending.values()) waiter.reject(this.exited);
      this.pending.clear();
    });
  }

  /** Forks the compiled `script` beside this file; its stdout goes to stderr, away from the report. */
  static fork<Message extends { type: string }>(script: string, label: string, onMessage: (message: Message) => void): IpcChild<Message> {
    const child = fork(join(__dirname, script), [], {
      // gc() before reading memory (worker-process.ts)
      execArgv: [...process.execArgv, '--expose-gc'],
      stdio: ['ignore', 2, 2, 'ipc'],
    });
    return new IpcChild<Message>(child, label, onMessage);
  }

  call(command: string, fields: object = {}): Promise<unknown> {
    if (this.exited) return Promise.reject(this.exited);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.send({ id, command, ...fields });
    });
  }

  /** Asks the child to close (its app, then itself); killed if it has not exited within 15 s. */
  async close(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<boolean>((resolve) => this.child.once('exit', () => resolve(true)));
    this.call('close').catch(() => undefined); // its reply races the exit; the exit is what counts
    if (!(await Promise.race([gone, sleep(15_000, false)]))) this.child.kill('SIGKILL');
  }

  kill(): void {
    this.child.kill();
  }
}

/**
 * The child's side: each request handled by `handle`, its value or error sent back; after
 * "close" is answered the process exits, whatever timer a library still holds. The bench gone
 * (it crashed or was killed): so is this process, rather than a worker left running.
 */
export function serveRequests<Request extends { id: number; command: string }>(handle: (request: Request) => Promise<unknown>): void {
  process.on('message', (request: Request) => {
    const then = request.command === 'close' ? () => process.exit(0) : undefined;
    handle(request).then(
      (value) => sendToBench({ type: 'reply', id: request.id, value }, then),
      (error: unknown) => sendToBench({ type: 'reply', id: request.id, error: error instanceof Error ? (error.stack ?? error.message) : String(error) }, then),
    );
  });
  process.on('disconnect', () => process.exit(1));
}

export function sendToBench(message: object, then?: () => void): void {
  process.send?.(message, undefined, undefined, then);
}
