/** `nestjs-job-queue/dashboard`: the web dashboard, apart from the core. */
export { JobQueueDashboardModule } from './dashboard.module';
export type { JobQueueDashboardOptions } from './dashboard.options';
