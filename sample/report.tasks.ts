import { Injectable } from '@nestjs/common';
import { Cron, CronExpression } from '@nestjs/schedule';
import { Task, type CronPayload, type JobContext } from '../libs/job-queue/src';

@Injectable()
export class ReportTasks {
  /** Once every 10 seconds across all replicas of the app, however many there are. */
  @Task('heartbeat_report')
  @Cron(CronExpression.EVERY_10_SECONDS)
  async heartbeat(payload: CronPayload, ctx: JobContext) {
    ctx.logger.log(`Heartbeat report for the tick at ${payload._cron.ts}`);
  }

  /** Nightly; after downtime, the nights missed within two days are added, marked backfilled. */
  @Task('nightly_digest', { backfillPeriod: '2d' })
  @Cron('0 3 * * *', { name: 'nightly_digest', timeZone: 'Europe/Paris' })
  async nightly(payload: CronPayload, ctx: JobContext) {
    ctx.logger.log(`Digest for ${payload._cron.ts}${payload._cron.backfilled ? ' (backfilled)' : ''}`);
  }
}
