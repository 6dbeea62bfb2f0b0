/**
 * Task providers many tests need, each with the record a test asserts on after the run
 * (never inside the handler, where a failed assertion would only cause a retry).
 */
import { Injectable, type Type } from '@nestjs/common';
import { Task, type JobContext } from '../../libs/job-queue/src';

/** A task that counts its runs per job id, taking `delayMs` each (a drain long enough to interrupt). */
export function countingTask(identifier: string, options: { delayMs?: number } = {}): { provider: Type; runs: Map<string, number> } {
  const runs = new Map<string, number>();
  @Injectable()
  class CountingTask {
    @Task(identifier)
    async run(_payload: unknown, ctx: JobContext) {
      runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
      if (options.delayMs) await new Promise((resolve) => setTimeout(resolve, options.delayMs));
    }
  }
  return { provider: CountingTask, runs };
}

/** A task that records `payload.name` of each job it runs, in the order it ran them. */
export function recordingTask(identifier: string): { provider: Type; ran: string[] } {
  const ran: string[] = [];
  @Injectable()
  class RecordingTask {
    @Task(identifier)
    async run(payload: { name: string }) {
      ran.push(payload.name);
    }
  }
  return { provider: RecordingTask, ran };
}
