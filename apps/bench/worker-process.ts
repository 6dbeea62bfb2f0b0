/**
 * One worker process of the scale lines: this library in a Nest application context of its own
 * (openApp, as the in-process lines use it), forked and driven by the bench over IPC
 * (worker-process-handle.ts). While its worker runs it reports how many handlers have started
 * and when the latest did, on the wall clock, so that the bench can time a drain shared by
 * several processes from its own "go".
 */
import 'reflect-metadata';
import type { BenchConfig } from './config';
import { sendToBench, serveRequests } from './ipc-child';
import type { QueueUnderTest } from './suite';
import { openApp } from './system-nestjs-job-queue';

export type WorkerProcessRequest = { id: number } & (
  | { command: 'open'; url: string; config: BenchConfig }
  | { command: 'start' | 'stop' | 'memory' | 'close' }
);

/** `lastStartAt`: epoch ms, fractional, comparable across the processes of one machine. */
export type WorkerProcessMessage = { type: 'progress'; started: number; lastStartAt: number };

export interface MemorySample {
  rss: number;
  heapUsed: number;
}

/** Often enough that the bench notices the end of a drain soon; its time comes from lastStartAt, not from this. */
const PROGRESS_INTERVAL_MS = 20;

let queue: QueueUnderTest | undefined;
let worker: { stop(): Promise<void> } | undefined;
let reporter: NodeJS.Timeout | undefined;
let reported = -1;

function reportProgress(): void {
  const probe = queue?.probe;
  if (!probe || probe.started === reported) return;
  reported = probe.started;
  sendToBench({ type: 'progress', started: probe.started, lastStartAt: performance.timeOrigin + probe.lastStartAt });
}

function opened(): QueueUnderTest {
  if (!queue) throw new Error('the worker process has no app yet: send "open" first');
  return queue;
}

/** Stops the worker if it runs (every completion written), and with it the progress reports. */
async function stopWorker(): Promise<void> {
  await worker?.stop();
  worker = undefined;
  clearInterval(reporter);
}

async function handle(request: WorkerProcessRequest): Promise<unknown> {
  switch (request.command) {
    case 'open':
      queue = await openApp(request.url, request.config);
      return undefined;
    case 'start': {
      const app = opened();
      app.probe.reset();
      reported = -1;
      worker = await app.startWorker('default');
      reporter = setInterval(reportProgress, PROGRESS_INTERVAL_MS);
      return undefined;
    }
    case 'stop':
      await stopWorker();
      reportProgress(); // the final count, ahead of this reply on the channel
      return opened().probe.started;
    case 'memory': {
      // After a full collection: what the process holds, not the garbage it has yet to collect.
      (globalThis as { gc?: () => void }).gc?.();
      const { rss, heapUsed } = process.memoryUsage();
      return { rss, heapUsed } satisfies MemorySample;
    }
    case 'close':
      await stopWorker();
      await queue?.close();
      return undefined;
  }
}

serveRequests(handle);
