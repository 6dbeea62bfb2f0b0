/**
 * The chaos run's child processes: three worker slots and a producer. A slot holds one process
 * at a time; a killed one is replaced in the same slot (with the same database address: the
 * LossyProxy's for slot 1). An exit nobody asked for is a crash, which the checker reports.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

export interface Crash {
  name: string;
  pid: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

export class ChaosProcess {
  readonly child: ChildProcess;
  output = '';
  readonly exited: Promise<void>;
  private told = false;
  stopped = false;

  constructor(readonly name: string, script: string, env: Record<string, string>, crashes: Crash[]) {
    this.child = spawn(process.execPath, [join(__dirname, script)], {
      env: { ...process.env, ...env, APP_NAME: `chaos-${name}` },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (chunk: Buffer) => (this.output = (this.output + chunk).slice(-20_000));
    this.child.stdout!.on('data', keep);
    this.child.stderr!.on('data', keep);
    this.exited = new Promise((resolve) =>
      this.child.on('close', (code, signal) => {
        if (!this.told) crashes.push({ name, pid: this.pid, code, signal, output: this.output });
        resolve();
      }),
    );
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** The connections' application_name: how faults find this process's backends. */
  get appName(): string {
    return `chaos-${this.name}`;
  }

  async ready(timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!/^ready /m.test(this.output)) {
      if (this.child.exitCode !== null || this.child.signalCode !== null) throw new Error(`${this.name} exited before it was ready:\n${this.output}`);
      if (Date.now() > deadline) throw new Error(`${this.name} not ready after ${timeoutMs} ms:\n${this.output}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  kill(): Promise<void> {
    this.told = true;
    this.child.kill('SIGKILL');
    return this.exited;
  }

  freeze(): void {
    this.stopped = true;
    this.child.kill('SIGSTOP');
  }

  thaw(): void {
    this.stopped = false;
    this.child.kill('SIGCONT');
  }

  /** SIGTERM and wait; SIGKILL after `graceMs`. */
  async stop(graceMs = 15_000): Promise<void> {
    this.told = true;
    if (this.stopped) this.thaw();
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}
