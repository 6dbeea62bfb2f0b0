import { Inject, Injectable, Logger, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import type { PoolClient } from 'pg';
import { TaskRegistry } from '../discovery/task-registry';
import { JobQueueError } from '../core/errors';
import { JobQueueDatabase } from '../db/job-queue-database';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { PinnedConnection } from '../db/pinned-connection';
import { JobQueueEvents } from '../events/job-queue-events';
import { backoffMs } from '../core/backoff';
import { createCronItem, LATE_TICK_GRACE_MS, nextWakeAt, ticksBetween, ticksDue, type CronItem, type CronItemSpec } from './cron-item';
import { parseCrontab } from './crontab-parser';

/** The scheduler re-reads the clock at least this often, so a jumped clock is noticed. */
const MAX_SLEEP_MS = 60_000;

/**
 * A failed wake-up is retried with the worker's backoff, but never later than this: the ticks
 * owed are added late only within LATE_TICK_GRACE_MS of the first, so a database that is back
 * within the grace must be tried again well within it. Uncapped (up to 10 s), the retry after
 * the 7th failure came 6.4 s later, and an outage of 6.5 s lost every tick owed since it began.
 */
const MAX_RETRY_MS = Math.min(1_000, LATE_TICK_GRACE_MS / 10);

/**
 * Turns `@Cron` on `@Task` methods (and the `crontab` option) into jobs: every process that
 * has the task runs this scheduler, and each tick becomes exactly one job in the cluster,
 * because the tick is claimed in known_crontabs in the statement that adds the job.
 *
 * Timing comes from the clock, not from accumulated timers: each wake-up computes the ticks
 * due since the last one handled (cron-item.ts ticksDue). A short delay (a stall, a database
 * outage of a few seconds) adds every tick late; after a long one (the process slept, the
 * clock jumped) only the latest tick is added, and older missed ones only within the
 * schedule's backfill period, marked `backfilled`.
 */
@Injectable()
export class CronScheduler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('JobQueueCron');
  private items: CronItem[] = [];
  /** Per schedule, the last tick handled by this process. */
  private readonly cursors = new Map<string, Date>();
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private failures = 0;
  private stopped = false;

  constructor(
    private readonly db: JobQueueDatabase,
    private readonly tasks: TaskRegistry,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
    private readonly pinned: PinnedConnection,
    private readonly events: JobQueueEvents,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    this.items = this.collectItems();
    if (this.items.length === 0) return;
    this.stopped = false;
    const bootedAt = new Date();
    const items = this.items;
    await this.db.run('registerCrontabs', [items.map((i) => i.identifier), items.map((i) => i.task), items.map((i) => i.expression), items.map((i) => i.timeZone)]);
    for (const item of this.items) {
      if (item.backfillMs > 0) await this.backfill(item, bootedAt);
      this.cursors.set(item.identifier, bootedAt);
    }
    this.logger.log(`Scheduling ${this.items.map((item) => `${item.identifier} (${item.source})`).join(', ')}`);
    this.schedule(0);
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** The schedules of this process: `@Cron` on `@Task` methods, then the crontab lines. */
  private collectItems(): CronItem[] {
    const specs: CronItemSpec[] = [];
    for (const task of this.tasks.all()) {
      if (!task.cron || task.cron.disabled) continue;
      const { cronTime, name, timeZone, utcOffset } = task.cron;
      const { payload, queueName, priority, maxAttempts, backfillPeriod } = task.options;
      specs.push({
        identifier: name ?? task.identifier,
        task: task.identifier,
        expression: cronTime,
        timeZone,
        utcOffset,
        payload,
        queueName,
        priority,
        maxAttempts,
        backfillPeriod,
        source: task.location,
      });
    }
    for (const spec of parseCrontab(this.options.crontab ?? '')) {
      const task = this.tasks.get(spec.task);
      if (!task) throw new JobQueueError('JQ_UNKNOWN_TASK', `${spec.source}: no @Task('${spec.task}') in this app`);
      const { queueName, priority, maxAttempts } = task.options;
      specs.push({ queueName, priority, maxAttempts, ...spec });
    }
    const items: CronItem[] = [];
    for (const spec of specs) {
      const item = createCronItem(spec);
      const twin = items.find((other) => other.identifier === item.identifier);
      if (twin) {
        throw new JobQueueError(
          'JQ_DUPLICATE_CRON',
          `two schedules have the identifier '${item.identifier}': ${twin.source} and ${item.source} (give one a name)`,
        );
      }
      items.push(item);
    }
    return items;
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.running = this.wake().finally(() => (this.running = undefined));
    }, Math.max(0, Math.min(MAX_SLEEP_MS, delayMs)));
  }

  private async wake(): Promise<void> {
    const now = new Date();
    let failed = false;
    for (const item of this.items) {
      if (this.stopped) return;
      const { onTime, missed } = ticksDue(item, this.cursors.get(item.identifier)!, now);
      try {
        for (const tick of missed) await this.addTick(this.db.pool, item, tick, true);
        for (const tick of onTime) {
          await this.addTick(this.db.pool, item, tick, false);
          this.cursors.set(item.identifier, tick);
        }
      } catch (error) {
        failed = true;
        this.events.reportError(this.pinned.workerId, 'cron', error);
      }
    }
    this.failures = failed ? this.failures + 1 : 0;
    if (failed) return this.schedule(Math.min(MAX_RETRY_MS, backoffMs(this.failures)));
    this.schedule(nextWakeAt(this.items, this.cursors, now).getTime() - Date.now());
  }

  /**
   * Adds the ticks missed while no process ran this schedule: after its last execution,
   * after it was first known, and within its backfill period; oldest first, in one
   * transaction holding the schedule's row, so that no live tick overtakes them.
   */
  private async backfill(item: CronItem, until: Date): Promise<void> {
    const client = await this.db.pool.connect();
    // A connection lost between two statements emits 'error' on the checked-out client, which
    // would crash the app without a listener; the next statement fails instead, and is retried.
    const ignore = () => undefined;
    client.on('error', ignore);
    try {
      await client.query('begin');
      const { rows } = await client.query<{ known_since: Date; last_execution: Date | null }>(this.db.sql.lockCrontab, [item.identifier]);
      const from = Math.max(until.getTime() - item.backfillMs, rows[0].known_since.getTime(), rows[0].last_execution?.getTime() ?? 0);
      const ticks = ticksBetween(item, new Date(from), until);
      for (const tick of ticks) await this.addTick(client, item, tick, true);
      await client.query('commit');
      if (ticks.length > 0) this.logger.log(`Backfilled ${ticks.length} missed tick(s) of ${item.identifier}`);
    } catch (error) {
      await client.query('rollback').catch(() => undefined);
      throw error;
    } finally {
      client.off('error', ignore);
      client.release();
    }
  }

  private async addTick(client: Pick<PoolClient, 'query'>, item: CronItem, tick: Date, backfilled: boolean): Promise<void> {
    const ts = tick.toISOString();
    const payload = JSON.stringify({ ...item.payload, _cron: { ts, backfilled } });
    const { rows } = await client.query<{ id: string }>(this.db.sql.scheduleCronTick, [
      item.identifier,
      tick,
      item.task,
      payload,
      item.queueName ?? null,
      item.maxAttempts ?? null,
      `cron:${item.identifier}:${ts}`,
      item.priority ?? null,
    ]);
    if (rows[0]) this.events.emit({ type: 'cron:schedule', identifier: item.identifier, ts: tick, backfilled, jobId: String(rows[0].id) });
  }
}
