import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { Task, type JobContext } from '../libs/job-queue/src';
import { User } from './user.entity';

@Injectable()
export class EmailTasks {
  constructor(private readonly dataSource: DataSource) {}

  @Task('send_welcome_email', { maxAttempts: 5 })
  async sendWelcome(payload: { userId: number }, ctx: JobContext) {
    const user = await this.dataSource.getRepository(User).findOneByOrFail({ id: payload.userId });
    ctx.logger.log(`Sending the welcome email to ${user.email}`);
    await ctx.addJob('sync_crm', { userId: user.id });
  }

  /** Fails twice, then succeeds: shows retries (with a short delay, to see it happen). */
  @Task('sync_crm', { retryDelay: (attempts) => attempts * 1000 })
  async syncCrm(payload: { userId: number }, ctx: JobContext) {
    if (ctx.job.attempts < 3) throw new Error(`CRM unavailable (attempt ${ctx.job.attempts})`);
    ctx.logger.log(`User ${payload.userId} synced to the CRM on attempt ${ctx.job.attempts}`);
  }

  /**
   * Jobs of the `billing` queue run one at a time, in order, across every replica. An
   * attempt may take 10 s at most: then `ctx.signal` aborts (JQ_JOB_TIMEOUT) and it is retried.
   */
  @Task('charge_invoice', { queueName: 'billing', timeout: '10s' })
  async chargeInvoice(payload: { invoice: number }, ctx: JobContext) {
    ctx.logger.log(`Charging invoice ${payload.invoice}`);
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, 200);
      ctx.signal.addEventListener('abort', () => (clearTimeout(timer), reject(ctx.signal.reason)));
    });
  }
}
