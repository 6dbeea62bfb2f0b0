import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { TypeOrmModule } from '@nestjs/typeorm';
import { JobQueueEntities, JobQueueModule } from '../libs/job-queue/src';
import { JobQueueDashboardModule } from '../libs/job-queue/src/dashboard';
import { JobQueueHealthIndicator } from '../libs/job-queue/src/terminus';
import { EmailTasks } from './email.tasks';
import { ExportTasks } from './export.tasks';
import { HealthController } from './health.controller';
import { LocalOnlyGuard } from './local-only.guard';
import { ReportTasks } from './report.tasks';
import { User } from './user.entity';
import { UsersController } from './users.controller';

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      // a factory: main.ts sets DATABASE_URL (embedded PostgreSQL) after this file is loaded
      useFactory: () => ({
        type: 'postgres',
        url: process.env.DATABASE_URL,
        entities: [User, ...JobQueueEntities],
        synchronize: true, // the sample's own table; the job tables come from the job queue's migrations
      }),
    }),
    // finished jobs are kept (with results) for a day, failed and cancelled ones for a week: the defaults
    JobQueueModule.forRoot({ concurrency: 5, retention: { completed: '1d', failed: '7d', cancelled: '7d' } }),
    // the dashboard at /dashboard, for requests from this machine only
    JobQueueDashboardModule.forRoot({ path: 'dashboard', guard: LocalOnlyGuard }),
    TerminusModule,
  ],
  providers: [EmailTasks, ExportTasks, ReportTasks, JobQueueHealthIndicator],
  controllers: [UsersController, HealthController],
})
export class AppModule {}
