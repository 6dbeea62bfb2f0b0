import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TypeOrmHealthIndicator } from '@nestjs/terminus';
import { JobQueueHealthIndicator } from '../libs/job-queue/src/terminus';

/** GET /health: a readiness probe, with the job queue's own checks beside Terminus's database ping. */
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly db: TypeOrmHealthIndicator,
    private readonly jobQueue: JobQueueHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.db.pingCheck('database'), () => this.jobQueue.isHealthy('jobQueue', { maxDueAge: '5m' })]);
  }
}
