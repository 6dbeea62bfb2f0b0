// The consumer check's ESM app: the worker runs the job that SignupService (src/signup.ts,
// taken from the README's "Testing your app") adds, and the job's row says it completed.
import { NestFactory } from '@nestjs/core';
import { JobQueueService } from 'nestjs-job-queue';
import { AppModule } from './app.module.js';
import { SignupService } from './signup.js';

const app = await NestFactory.createApplicationContext(AppModule, { abortOnError: false });
try {
  const email = `esm-${Date.now()}@example.com`;
  const added = await app.get(SignupService).signUp(email);
  const jobs = app.get(JobQueueService);
  await jobs.waitForJob(added.id, { timeout: '60s' });
  const job = await jobs.getJob(added.id);
  if (job?.state !== 'completed') throw new Error(`job ${added.id}: expected completed, got ${JSON.stringify(job)}`);
  if (JSON.stringify(job.result) !== JSON.stringify({ sentTo: email })) throw new Error(`job ${added.id}: unexpected result ${JSON.stringify(job.result)}`);
  console.log(`ESM app: job ${job.id} (${job.taskIdentifier}) ${job.state}, result ${JSON.stringify(job.result)}`);
} finally {
  await app.close();
}
