import { Module, type DynamicModule } from '@nestjs/common';
import { RouterModule } from '@nestjs/core';
import { DashboardAssetsController } from './assets.controller';
import { DashboardController } from './dashboard.controller';
import { DashboardTasksController } from './tasks.controller';
import { DashboardGuard } from './dashboard.guard';
import { DASHBOARD_OPTIONS, resolveDashboardOptions, type JobQueueDashboardOptions } from './dashboard.options';
import { DashboardReader } from './dashboard-reader';

/**
 * `JobQueueDashboardModule.forRoot({ path, guard, readOnly, public, redact })`, beside
 * JobQueueModule: a web dashboard of the queue at `path`, as ordinary Nest routes. It refuses
 * to start without a guard or an explicit `public: true` (JQ_DASHBOARD_UNGUARDED).
 */
@Module({})
export class JobQueueDashboardModule {
  static forRoot(options: JobQueueDashboardOptions): DynamicModule {
    const resolved = resolveDashboardOptions(options);
    return {
      module: JobQueueDashboardModule,
      imports: [RouterModule.register([{ path: resolved.path, module: JobQueueDashboardModule }])],
      controllers: [DashboardController, DashboardTasksController, DashboardAssetsController],
      providers: [{ provide: DASHBOARD_OPTIONS, useValue: resolved }, DashboardGuard, DashboardReader],
    };
  }
}
