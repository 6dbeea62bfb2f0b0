import type { JobSpec, JobSpecWithIdentifier } from './job';

/**
 * The app's tasks and their payloads, for the compiler. Empty, any task name compiles; once
 * the app augments it, only its keys do, each with its own payload:
 *
 *     declare module 'nestjs-job-queue' {
 *       interface JobQueueTasks {
 *         send_email: { to: string };
 *       }
 *     }
 *
 * A name built at run time: `jobs.add(name as TaskName, payload as TaskPayload<TaskName>)`.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-interface
export interface JobQueueTasks {}

/** A task name: any string while JobQueueTasks is empty, else one of its keys. */
export type TaskName = [keyof JobQueueTasks] extends [never] ? string : Extract<keyof JobQueueTasks, string>;

/** The payload of a task: JobQueueTasks[Name], or unknown for a task it does not list. */
export type TaskPayload<Name extends string> = Name extends keyof JobQueueTasks ? JobQueueTasks[Name] : unknown;

/** add()'s arguments after the name: the payload may be left out only where it may be undefined. */
export type AddArgs<Name extends string, Spec = JobSpec> = undefined extends TaskPayload<Name>
  ? [payload?: TaskPayload<Name>, spec?: Spec]
  : [payload: TaskPayload<Name>, spec?: Spec];

/** One entry of addMany(): identifier and payload checked together, per task. */
export type TypedJobSpec = {
  [Name in TaskName]: Omit<JobSpecWithIdentifier, 'identifier' | 'payload'> & { identifier: Name } & (undefined extends TaskPayload<Name>
      ? { payload?: TaskPayload<Name> }
      : { payload: TaskPayload<Name> });
}[TaskName];
