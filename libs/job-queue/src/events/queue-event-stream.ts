import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { Inject, Injectable, Logger, type BeforeApplicationShutdown } from '@nestjs/common';
import { Observable } from 'rxjs';
import { JobQueueError } from '../core/errors';
import { errorMessage } from '../core/job-outcome';
import { JOB_QUEUE_OPTIONS, type ResolvedJobQueueOptions } from '../core/options';
import {
  mergeQueueEventFilters,
  queueEventFilter,
  queueEventsFromNotification,
  wantsQueueEvent,
  type QueueEvent,
  type QueueEventFilter,
} from '../core/queue-events';
import { JobQueueDatabase } from '../db/job-queue-database';
import { NotifyListener } from '../db/notify-listener';

/** One subscriber: what it wants, and where its events go. */
interface Interest {
  filter: QueueEventFilter;
  deliver: (event: QueueEvent) => void;
}

/** A subscription of subscribe(): `ready` once the cluster publishes what it wants. */
export interface QueueEventSubscription {
  ready: Promise<void>;
  unsubscribe(): Promise<void>;
}

/**
 * This process's hearing of cluster-wide job events. While anything here subscribes
 * (`@OnQueueEvent` methods, `queueEvents$` subscribers), it LISTENs on the events channel and
 * keeps a row in `event_listeners` with what they want, renewed every heartbeatInterval and
 * expiring `workerTimeout` after its last renewal (a process that dies stops costing then).
 * The releases of every worker read those rows (QueueEventAudience) and publish what some
 * row wants. When the last subscriber leaves, the row goes and so does the cost.
 */
@Injectable()
export class QueueEventStream implements BeforeApplicationShutdown {
  private readonly logger = new Logger('JobQueueEvents');
  private readonly id = `events-${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  private readonly interests = new Set<Interest>();
  private listener?: NotifyListener;
  /** The filter the row holds now (null: no row). */
  private registered: string | null = null;
  private renewTimer?: NodeJS.Timeout;
  /** Changes of the row and the LISTEN, one at a time. */
  private changes: Promise<void> = Promise.resolve();

  /**
   * Every event of the cluster; each subscription registers this process as a listener of all
   * of them. Errors at once (JQ_INVALID_OPTIONS) where this process cannot LISTEN.
   */
  readonly events$: Observable<QueueEvent> = new Observable<QueueEvent>((subscriber) => {
    const refused = this.refusal('queueEvents$');
    if (refused) {
      subscriber.error(refused);
      return;
    }
    const subscription = this.subscribe(queueEventFilter([]), (event) => subscriber.next(event));
    return () => void subscription.unsubscribe();
  });

  constructor(
    private readonly db: JobQueueDatabase,
    @Inject(JOB_QUEUE_OPTIONS) private readonly options: ResolvedJobQueueOptions,
  ) {}

  /**
   * Why `who` cannot hear queue events here, or undefined. Through a transaction-mode pooler
   * without listenUrl nothing can LISTEN, and events are notifications, kept nowhere a poll
   * could read them: subscribers are refused rather than left to hear nothing.
   */
  refusal(who: string): JobQueueError | undefined {
    if (!this.options.transactionPooling || this.options.listenUrl) return undefined;
    return new JobQueueError(
      'JQ_INVALID_OPTIONS',
      `${who} needs listenUrl with transactionPooling: cluster-wide events arrive by NOTIFY, which only a LISTEN on a direct connection hears ` +
        '(a transaction-mode pooler cannot keep one), and they are not stored for a poll to find. Set listenUrl to a direct connection string, ' +
        'or use @OnJobEvent (this process\'s own events) or getJob()/waitForJob() instead',
    );
  }

  /** Calls `deliver` with every event `filter` wants, from now until unsubscribe(). Throws refusal()'s error where it cannot. */
  subscribe(filter: QueueEventFilter, deliver: (event: QueueEvent) => void): QueueEventSubscription {
    const refused = this.refusal('a subscription to queue events');
    if (refused) throw refused;
    const interest = { filter, deliver };
    this.interests.add(interest);
    return {
      ready: this.sync(),
      unsubscribe: () => {
        this.interests.delete(interest);
        return this.sync();
      },
    };
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.interests.clear();
    await this.sync();
  }

  /** Brings the LISTEN and the row in line with the subscribers, after the changes before it. */
  private sync(): Promise<void> {
    this.changes = this.changes.then(() => this.apply()).catch((error: unknown) => this.logger.warn(`queue events: ${errorMessage(error)}`));
    return this.changes;
  }

  private async apply(): Promise<void> {
    clearTimeout(this.renewTimer);
    const merged = mergeQueueEventFilters([...this.interests].map((interest) => interest.filter));
    const wanted = merged && JSON.stringify(merged);
    try {
      if (wanted !== null && !this.listener) {
        // LISTEN first: whatever is published once the row exists is heard
        this.listener = new NotifyListener(
          this.db.listenPool ?? this.db.pool,
          [this.db.sql.eventsChannel],
          (channel, payload) => channel && payload && this.heard(payload),
          (error) => this.logger.warn(`listening for queue events failed, retrying: ${errorMessage(error)}`),
          `nestjs-job-queue events ${process.pid}`,
        );
        await this.listener.start();
      }
      if (wanted !== this.registered) {
        if (wanted === null) await this.db.run('dropEventListener', [this.id]);
        else await this.db.run('putEventListener', [this.id, wanted, this.options.workerTimeout]);
        this.registered = wanted;
      }
      if (wanted === null && this.listener) {
        const listener = this.listener;
        this.listener = undefined;
        await listener.stop();
      }
    } finally {
      // renewed every heartbeat; a change that failed is tried again then
      if (wanted !== null || this.registered !== null) this.renewTimer = setTimeout(() => void this.renew(), this.options.heartbeatInterval).unref();
    }
  }

  /** Keeps the row alive; puts it back if it expired meanwhile (a stall, a database restart). */
  private async renew(): Promise<void> {
    this.changes = this.changes.then(async () => {
      if (this.registered === null) return;
      const renewed = await this.db.run('renewEventListener', [this.id, this.options.workerTimeout]).catch((error: unknown) => {
        this.logger.warn(`renewing the queue event listener failed, retrying: ${errorMessage(error)}`);
        return [{}];
      });
      if (renewed.length === 0) this.registered = null; // apply() puts it back
      await this.apply();
    });
    await this.changes.catch(() => undefined);
  }

  private heard(payload: string): void {
    if (!payload.startsWith('{"at":')) return; // not the library's (someone else's NOTIFY on the channel)
    let events: QueueEvent[];
    try {
      events = queueEventsFromNotification(payload);
    } catch (error) {
      this.logger.warn(`a queue event notification could not be read: ${errorMessage(error)}`);
      return;
    }
    for (const event of events) {
      for (const interest of this.interests) if (wantsQueueEvent(interest.filter, event)) interest.deliver(event);
    }
  }
}
