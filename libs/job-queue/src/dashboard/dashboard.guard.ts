import { ForbiddenException, Inject, Injectable, Optional, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { isObservable, lastValueFrom } from 'rxjs';
import { checkCsrf, type HttpRequest } from './csrf';
import { DASHBOARD_OPTIONS, type ResolvedDashboardOptions } from './dashboard.options';

/** The app's own guard for the dashboard (the `guard` option), as a provider. */
export const DASHBOARD_USER_GUARD = Symbol('JOB_QUEUE_DASHBOARD_USER_GUARD');

/**
 * Every dashboard route: the app's guard first (a refused request gets a 403 and no data),
 * then, for actions, read-only mode and the cross-site check.
 */
@Injectable()
export class DashboardGuard implements CanActivate {
  constructor(
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
    @Optional() @Inject(DASHBOARD_USER_GUARD) private readonly userGuard?: CanActivate,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    if (this.userGuard) {
      const verdict = this.userGuard.canActivate(context);
      const admitted = isObservable(verdict) ? await lastValueFrom(verdict) : await verdict;
      if (!admitted) return false;
    }
    const request = context.switchToHttp().getRequest<HttpRequest>();
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      if (this.options.readOnly) throw new ForbiddenException('the dashboard is read-only');
      checkCsrf(request);
    }
    return true;
  }
}
