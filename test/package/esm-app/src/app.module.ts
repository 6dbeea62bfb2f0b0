import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { JobQueueEntities, JobQueueModule } from 'nestjs-job-queue';
import { SignupService, WelcomeTasks } from './signup.js';

@Module({
  imports: [
    TypeOrmModule.forRoot({ type: 'postgres', url: process.env.DATABASE_URL, entities: [...JobQueueEntities] }),
    JobQueueModule.forRoot(), // every option has a default
  ],
  providers: [SignupService, WelcomeTasks],
})
export class AppModule {}
