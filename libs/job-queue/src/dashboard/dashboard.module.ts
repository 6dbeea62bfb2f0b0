import { Module, type DynamicModule, type Provider } from '@nestjs/common';
import { RouterModule } from '@nestjs/core';
import { DashboardAssetsController } from './assets.controller';
import { DashboardController } from './dashboard.controller';
import { DASHBOARD_USER_GUARD, DashboardGuard } from './dashboard.guard';
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
    const guard: Provider[] = !resolved.guard
      ? []
      : typeof resolved.guard === 'function'
        ? [{ provide: DASHBOARD_USER_GUARD, useClass: resolved.guard }]
        : [{ provide: DASHBOARD_USER_GUARD, useValue: resolved.guard }];
    return {
      module: JobQueueDashboardModule,
      imports: [RouterModule.register([{ path: resolved.path, module: JobQueueDashboardModule }])],
      controllers: [DashboardController, DashboardAssetsController],
      providers: [{ provide: DASHBOARD_OPTIONS, useValue: resolved }, ...guard, DashboardGuard, DashboardReader],
    };
  }
}
