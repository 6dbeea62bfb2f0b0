import { Body, Controller, Get, NotFoundException, Param, Post } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { JobQueueService } from '../libs/job-queue/src';
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

  @Get('jobs/:id')
  async getJob(@Param('id') id: string) {
    const job = await this.jobs.getJob(id);
    if (!job) throw new NotFoundException(`job ${id} is not queued (finished jobs are deleted)`);
    return job;
  }
}
