import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { JobQueueEntities, JobQueueModule } from '../libs/job-queue/src';
import { EmailTasks } from './email.tasks';
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
    JobQueueModule.forRoot({ concurrency: 5 }),
  ],
  providers: [EmailTasks, ReportTasks],
  controllers: [UsersController],
})
export class AppModule {}
