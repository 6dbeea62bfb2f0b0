/**
 * `@Cron` from @nestjs/schedule stores its options under these metadata keys (its public
 * exports do not include them; see @nestjs/schedule's schedule.constants). A `@Cron` on a
 * `@Task` method belongs to the job queue: its metadata is moved under our own key before
 * @nestjs/schedule's explorer runs (in its onModuleInit), so that ScheduleModule never
 * also runs it in-process on every replica.
 */
const SCHEDULE_CRON_OPTIONS = 'SCHEDULE_CRON_OPTIONS';
const SCHEDULER_TYPE = 'SCHEDULER_TYPE';
const SCHEDULER_NAME = 'SCHEDULER_NAME';
const SCHEDULER_TYPE_CRON = 1;

const QUEUED_CRON = 'nestjs-job-queue:cron';

/** What @nestjs/schedule's `@Cron(cronTime, options)` records. */
export interface NestCronOptions {
  cronTime: unknown;
  name?: string;
  timeZone?: unknown;
  utcOffset?: unknown;
  disabled?: boolean;
}

/** Takes over the `@Cron` metadata of a task method (idempotent: apps in one process share the class). */
export function takeCronMetadata(method: object): NestCronOptions | undefined {
  const taken = Reflect.getMetadata(QUEUED_CRON, method) as NestCronOptions | undefined;
  if (taken) return taken;
  if (Reflect.getMetadata(SCHEDULER_TYPE, method) !== SCHEDULER_TYPE_CRON) return undefined;
  const options = Reflect.getMetadata(SCHEDULE_CRON_OPTIONS, method) as NestCronOptions;
  Reflect.defineMetadata(QUEUED_CRON, options, method);
  for (const key of [SCHEDULER_TYPE, SCHEDULE_CRON_OPTIONS, SCHEDULER_NAME]) Reflect.deleteMetadata(key, method);
  return options;
}
