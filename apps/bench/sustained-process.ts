/**
 * One process of the sustained lines (sustained.ts), forked and driven by the bench over IPC
 * (sustained-handle.ts): for one system, either a producer, which adds jobs one add() at a
 * time at a fixed rate, as an API replica would, or a worker, which runs them and reports each
 * job's wait from its add to its handler's start. Both stamp the wall clock (epoch ms,
 * fractional), comparable across the processes of one machine.
 */
import 'reflect-metadata';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchConfig } from './config';
import { sendToBench, serveRequests } from './ipc-child';
import type { QueueUnderTest } from './suite';
import { openGraphileWorker } from './system-graphile-worker';
import { openApp } from './system-nestjs-job-queue';

export const SUSTAINED_SYSTEMS = ['nestjs-job-queue', 'graphile-worker', 'graphile-worker batched'] as const;
export type SustainedSystem = (typeof SUSTAINED_SYSTEMS)[number];
export type SustainedRole = 'producer' | 'worker';

export type SustainedRequest = { id: number } & (
  | { command: 'open'; url: string; config: BenchConfig; system: SustainedSystem; role: SustainedRole; index: number }
  /** `rate` null: flat out. */
  | { command: 'produce'; rate: number | null; seconds: number }
  | { command: 'counts' | 'close' }
);

/** A worker's starts since its last message: [startedAt, waitMs, startedAt, waitMs, …]. */
export type SustainedMessage = { type: 'starts'; samples: number[] };

/** What one produce() did: adds made, how far behind its schedule the last one was issued (ms), and each add's own time, from its call to its answer (ms). */
export interface Produced {
  added: number;
  behindMs: number;
  addMs: number[];
}

/** What a process has done so far: handlers started (workers) or jobs added (producers), and its CPU time (µs). */
export interface ProcessCounts {
  started: number;
  added: number;
  cpuMicros: number;
}

/** How often a worker sends its samples: often enough that a slice's are in when the bench reads it. */
const SAMPLES_INTERVAL_MS = 200;

let queue: QueueUnderTest | undefined;
let benchConfig: BenchConfig | undefined;
let worker: { stop(): Promise<void> } | undefined;
let samples: number[] = [];
let flusher: NodeJS.Timeout | undefined;
let added = 0;
/** This producer's next payload index: each producer's are its own (index × 10⁹ on). */
let nextIndex = 0;

function flushSamples(): void {
  if (samples.length === 0) return;
  sendToBench({ type: 'starts', samples } satisfies SustainedMessage);
  samples = [];
}

function opened(): QueueUnderTest {
  if (!queue) throw new Error('the sustained process has no app yet: send "open" first');
  return queue;
}

async function open(url: string, config: BenchConfig, system: SustainedSystem): Promise<QueueUnderTest> {
  return system === 'nestjs-job-queue' ? openApp(url, config) : openGraphileWorker(url, config);
}

/**
 * Adds `rate` jobs a second for `seconds`, each at its due time (open loop: a slow add does not
 * slow the schedule), at most `poolSize - 1` in flight; past that the adds fall behind, and
 * `behindMs` says by how much. A rate of null adds flat out, as many in flight as allowed.
 */
async function produce(perSecond: number | null, seconds: number, config: BenchConfig): Promise<Produced> {
  const app = opened();
  const rate = perSecond ?? Infinity;
  const total = perSecond === null ? Infinity : Math.round(perSecond * seconds);
  const maxInFlight = Math.max(1, config.poolSize - 1);
  const begin = performance.now();
  const endAt = begin + seconds * 1000;
  let issued = 0;
  let inFlight = 0;
  let behindMs = 0;
  const addMs: number[] = [];
  let failure: unknown;
  while (issued < total && performance.now() < endAt && failure === undefined) {
    const due = Math.min(total, Math.floor(((performance.now() - begin) / 1000) * rate) + 1);
    while (issued < due && inFlight < maxInFlight) {
      // stamped with its due time: a producer that falls behind counts in the wait, as an app's would
      const dueAt = perSecond === null ? performance.now() : begin + (issued / rate) * 1000;
      behindMs = Math.max(behindMs, performance.now() - dueAt);
      inFlight += 1;
      issued += 1;
      const called = performance.now();
      app.addOne(nextIndex++, performance.timeOrigin + dueAt).then(
        () => ((inFlight -= 1), (added += 1), addMs.push(performance.now() - called)),
        (error: unknown) => ((inFlight -= 1), (failure = error)),
      );
    }
    await sleep(1);
  }
  while (inFlight > 0) await sleep(1);
  if (failure !== undefined) throw failure;
  // a schedule not kept to the end: the adds due after the last one issued were never made
  if (perSecond !== null && issued < total) behindMs = Math.max(behindMs, ((total - issued) / rate) * 1000);
  return { added: issued, behindMs, addMs };
}

async function handle(request: SustainedRequest): Promise<unknown> {
  switch (request.command) {
    case 'open': {
      const { url, config, system, role, index } = request;
      queue = await open(url, config, system);
      benchConfig = config;
      nextIndex = index * 1_000_000_000;
      if (role === 'worker') {
        queue.probe.onStart = (addedAt, startedAt) => samples.push(startedAt, startedAt - addedAt);
        worker = await queue.startWorker(system === 'graphile-worker batched' ? 'batched' : 'default');
        flusher = setInterval(flushSamples, SAMPLES_INTERVAL_MS);
      }
      return undefined;
    }
    case 'produce':
      return produce(request.rate, request.seconds, benchConfig!);
    case 'counts': {
      flushSamples(); // ahead of this reply on the channel
      const cpu = process.cpuUsage();
      return { started: queue?.probe.started ?? 0, added, cpuMicros: cpu.user + cpu.system } satisfies ProcessCounts;
    }
    case 'close':
      clearInterval(flusher);
      await worker?.stop();
      flushSamples();
      await queue?.close();
      return undefined;
  }
}

serveRequests(handle);
