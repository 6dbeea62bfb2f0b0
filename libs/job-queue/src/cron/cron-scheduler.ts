import { Inject, Injectable, Logger, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import type { PoolClient } from 'pg';
import { TaskRegistry } from '../discovery/task-registry';
import { JobQueueError } from '../core/errors';
import { JobQueueDatabase } from '../db/job-queue-database';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import { PinnedConnection } from '../db/pinned-connection';
import { JobQueueEvents } from '../events/job-queue-events';
import { backoffMs } from '../core/backoff';
import type { ScheduleRow } from '../sql/cron';
import { createCronItem, LATE_TICK_GRACE_MS, nextWakeAt, ticksBetween, ticksDue, type CronItem, type CronItemSpec } from './cron-item';
import { parseCrontab } from './crontab-parser';
import { nextCursor, storedSchedule, type StoredSchedule } from './stored-schedules';

/** The scheduler re-reads the clock at least this often, so a jumped clock is noticed. */
const MAX_SLEEP_MS = 60_000;

/**
 * A failed wake-up is retried with the worker's backoff, but never later than this: the ticks
 * owed are added late only within LATE_TICK_GRACE_MS of the first, so a database that is back
 * within the grace must be tried again well within it. Uncapped (up to 10 s), the retry after
 * the 7th failure came 6.4 s later, and an outage of 6.5 s lost every tick owed since it began.
 */
const MAX_RETRY_MS = Math.min(1_000, LATE_TICK_GRACE_MS / 10);

/** A schedule this process ticks, and the last tick it handled. */
interface Ticking {
  schedule: StoredSchedule;
  cursor: Date;
}

/**
 * Turns schedules into jobs: `@Cron` on `@Task` methods and the `crontab` option (declared in
 * code), and the schedules given at run time (upsertSchedule). Each tick becomes exactly one
 * job in the cluster, because the tick is claimed in known_crontabs in the statement that
 * adds the job.
 *
 * The stored schedule is the single source of truth: at startup a process writes the
 * schedules it declares (the latest process to start wins), then every wake-up (at each tick,
 * and at least every `pollInterval`) reads the rows of those schedules and of every run-time
 * one, and ticks what they say. A change, a pause or a removal thus reaches every process
 * within `pollInterval`; a tick computed from an older revision is refused by the statement.
 * A process ticks a declared schedule only while it declares it (a `@Cron` removed from the
 * code stops with the last process that has it), and every run-time schedule.
 *
 * Timing comes from the clock, not from accumulated timers: each wake-up computes the ticks
 * due since the last one handled (cron-item.ts ticksDue). A short delay (a stall, a database
 * outage of a few seconds) adds every tick late; after a long one (the process slept, the
 * clock jumped) only the latest tick is added, and older missed ones only within the
 * schedule's backfill period, marked `backfilled`. A pause skips its ticks.
 */
@Injectable()
export class CronScheduler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('JobQueueCron');
  /** The schedules this process declares in code. */
  private declared: CronItem[] = [];
  /** Every schedule this process ticks, by id, as last read. */
  private readonly ticking = new Map<string, Ticking>();
  /** Rows this version cannot tick, by id and signature, warned about once. */
  private readonly unreadable = new Set<string>();
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
    this.declared = this.collectItems();
    this.stopped = false;
    const bootedAt = new Date();
    const items = this.declared;
    // A producer-only app (worker: false) that declares nothing leaves the ticks to the apps that run jobs.
    if (items.length === 0 && !this.options.worker) return;
    if (items.length > 0) {
      await this.db.run('registerCrontabs', [
        items.map((i) => i.identifier),
        items.map((i) => i.task),
        items.map((i) => i.expression),
        items.map((i) => i.timeZone),
        items.map((i) => JSON.stringify(i.payload)),
        items.map((i) => i.queueName ?? null),
        items.map((i) => i.priority ?? null),
        items.map((i) => i.maxAttempts ?? null),
        items.map((i) => i.backfillMs),
      ]);
      // what was missed while no process ran them; run-time schedules are read at the first
      // wake-up, so that an app with none declared starts on a schema it does not migrate
      for (const schedule of await this.read()) {
        if (!schedule.paused && schedule.item.backfillMs > 0) await this.backfill(schedule, bootedAt);
        this.ticking.set(schedule.item.identifier, { schedule, cursor: bootedAt });
      }
      this.logger.log(`Scheduling ${items.map((item) => `${item.identifier} (${item.source})`).join(', ')}`);
    }
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

  /** The schedules this process ticks, as their rows say now (the ones this version cannot read left out, with a warning). */
  private async read(): Promise<StoredSchedule[]> {
    const rows = await this.db.run<ScheduleRow>('loadSchedules', [this.declared.map((item) => item.identifier)]);
    const schedules: StoredSchedule[] = [];
    for (const row of rows) {
      const schedule = storedSchedule(row);
      if (schedule) schedules.push(schedule);
      else if (!this.unreadable.has(`${row.identifier} ${row.revision}`)) {
        this.unreadable.add(`${row.identifier} ${row.revision}`);
        this.logger.warn(`Schedule ${row.identifier} is not ticked here: its row has no task or an expression this version cannot read`);
      }
    }
    return schedules;
  }

  /** Reads the table again: new, changed, paused, resumed and removed schedules take effect here. */
  private async reload(now: Date): Promise<void> {
    const schedules = await this.read();
    const seen = new Set<string>();
    for (const schedule of schedules) {
      const id = schedule.item.identifier;
      seen.add(id);
      const before = this.ticking.get(id);
      this.ticking.set(id, { schedule, cursor: nextCursor(before, schedule, now) });
    }
    for (const id of [...this.ticking.keys()]) if (!seen.has(id)) this.ticking.delete(id);
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
    try {
      await this.reload(now);
    } catch (error) {
      failed = true;
      this.events.reportError(this.pinned.workerId, 'cron', error);
    }
    for (const entry of this.ticking.values()) {
      if (this.stopped) return;
      if (entry.schedule.paused) {
        entry.cursor = now;
        continue;
      }
      const { onTime, missed } = ticksDue(entry.schedule.item, entry.cursor, now);
      try {
        for (const tick of missed) await this.addTick(this.db.pool, entry.schedule, tick, true);
        for (const tick of onTime) {
          await this.addTick(this.db.pool, entry.schedule, tick, false);
          entry.cursor = tick;
        }
      } catch (error) {
        failed = true;
        this.events.reportError(this.pinned.workerId, 'cron', error);
      }
    }
    this.failures = failed ? this.failures + 1 : 0;
    if (failed) return this.schedule(Math.min(MAX_RETRY_MS, backoffMs(this.failures)));
    const live = [...this.ticking.values()].filter((entry) => !entry.schedule.paused);
    const cursors = new Map(live.map((entry) => [entry.schedule.item.identifier, entry.cursor]));
    const nextTick = live.length > 0 ? nextWakeAt(live.map((entry) => entry.schedule.item), cursors, now).getTime() : Infinity;
    // the next reading of the table is due a pollInterval after this one
    this.schedule(Math.min(nextTick, now.getTime() + this.options.pollInterval) - Date.now());
  }

  /**
   * Adds the ticks missed while no process ran this schedule: after its last execution,
   * after it was first known or last resumed, and within its backfill period; oldest
   * first, in one transaction holding the schedule's row, so that no live tick overtakes them.
   */
  private async backfill(schedule: StoredSchedule, until: Date): Promise<void> {
    const { item } = schedule;
    const client = await this.db.pool.connect();
    // A connection lost between two statements emits 'error' on the checked-out client, which
    // would crash the app without a listener; the next statement fails instead, and is retried.
    const ignore = () => undefined;
    client.on('error', ignore);
    try {
      await client.query('begin');
      const { rows } = await client.query<ScheduleRow>(this.db.sql.lockCrontab, [item.identifier]);
      const row = rows[0];
      // gone, paused or changed since it was read: the live ticks take it from here
      const ticks =
        row && row.paused_at === null && row.revision === schedule.revision
          ? ticksBetween(item, new Date(Math.max(until.getTime() - item.backfillMs, ...[row.known_since, row.last_execution, row.resumed_at].map((at) => at?.getTime() ?? 0))), until)
          : [];
      for (const tick of ticks) await this.addTick(client, schedule, tick, true);
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

  private async addTick(client: Pick<PoolClient, 'query'>, schedule: StoredSchedule, tick: Date, backfilled: boolean): Promise<void> {
    const { item } = schedule;
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
      schedule.revision,
    ]);
    if (rows[0]) this.events.emit({ type: 'cron:schedule', identifier: item.identifier, ts: tick, backfilled, jobId: String(rows[0].id) });
  }
}
