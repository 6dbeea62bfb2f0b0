import { Body, Controller, Get, NotFoundException, Param, Post, Query } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { JobQueueService, type JobState } from '../libs/job-queue/src';
import { User } from './user.entity';

@Controller()
export class UsersController {
  constructor(
    private readonly dataSource: DataSource,
    private readonly jobs: JobQueueService,
  ) {}

  /** Saves the user and adds the welcome email in one transaction: both commit, or neither. */
  @Post('users')
  createUser(@Body() body: { email: string }) {
    return this.dataSource.transaction(async (manager) => {
      const user = await manager.save(User, { email: body.email });
      const job = await this.jobs.add('send_welcome_email', { userId: user.id }, { manager });
      return { user, jobId: job.id };
    });
  }

  /** A page of jobs, e.g. GET /jobs?state=failed; pass `nextCursor` back as ?cursor= for the next page. */
  @Get('jobs')
  listJobs(@Query('state') state?: JobState, @Query('task') task?: string, @Query('cursor') cursor?: string) {
    return this.jobs.listJobs({ state, task, cursor, limit: 20 });
  }

  @Get('jobs/counts')
  countJobs() {
    return this.jobs.countJobs();
  }

  @Get('jobs/:id')
  async getJob(@Param('id') id: string) {
    const job = await this.jobs.getJob(id);
    if (!job) throw new NotFoundException(`no job ${id} (finished jobs are kept for their retention only)`);
    return job;
  }

  /** Cancels the job, even while it runs, in whichever replica runs it. */
  @Post('jobs/:id/cancel')
  cancelJob(@Param('id') id: string, @Body() body: { reason?: string }) {
    return this.jobs.cancelJob(id, body?.reason);
  }
}
