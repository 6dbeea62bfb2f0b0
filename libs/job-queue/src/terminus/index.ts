/** `nestjs-job-queue/terminus`: a health indicator for @nestjs/terminus, apart from the core. */
export { JobQueueHealthIndicator, type JobQueueHealthOptions } from './job-queue.health';
