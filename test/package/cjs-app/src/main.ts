// The consumer check's CommonJS app (a package.json without "type", as `nest new --type cjs`
// makes): one task, one job added and run by the worker, its row read back as completed.
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { JobQueueModule, JobQueueService, Task } from 'nestjs-job-queue';
import type { JobContext } from 'nestjs-job-queue';

@Injectable()
class ReportTasks {
  @Task('build_report')
  async build(payload: { month: string }, ctx: JobContext) {
    ctx.logger.log(`Building the report for ${payload.month} (attempt ${ctx.job.attempts})`);
    return { month: payload.month, rows: 3 };
  }
}

@Module({
  imports: [TypeOrmModule.forRoot({ type: 'postgres', url: process.env.DATABASE_URL }), JobQueueModule.forRoot()],
  providers: [ReportTasks],
})
class AppModule {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(AppModule, { abortOnError: false });
  try {
    const jobs = app.get(JobQueueService);
    const added = await jobs.add('build_report', { month: '2026-11' });
    await jobs.waitForJob(added.id, { timeout: '60s' });
    const job = await jobs.getJob(added.id);
    if (job?.state !== 'completed') throw new Error(`job ${added.id}: expected completed, got ${JSON.stringify(job)}`);
    console.log(`CJS app: job ${job.id} (${job.taskIdentifier}) ${job.state}, result ${JSON.stringify(job.result)}`);
  } finally {
    await app.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
