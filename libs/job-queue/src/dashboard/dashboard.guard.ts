import { ForbiddenException, Inject, Injectable, type CanActivate, type ExecutionContext, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { isObservable, lastValueFrom } from 'rxjs';
import { JobQueueError } from '../core/errors';
import { checkCsrf } from './csrf';
import type { HttpRequest } from './http';
import { DASHBOARD_OPTIONS, type ResolvedDashboardOptions } from './dashboard.options';

/**
 * Every dashboard route: the app's guard first (a refused request gets a 403 and no data),
 * then, for actions, read-only mode and the cross-site check.
 */
@Injectable()
export class DashboardGuard implements CanActivate, OnModuleInit {
  private userGuard?: CanActivate;

  constructor(
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
    private readonly moduleRef: ModuleRef,
  ) {}

  /**
   * The `guard` option as an instance. A class is taken from the app's modules when one
   * provides it, so that its dependencies (a session service, say) come from there: this
   * module imports none of the app's. Otherwise it is made here, from global providers only.
   */
  async onModuleInit(): Promise<void> {
    const guard = this.options.guard;
    if (!guard || typeof guard !== 'function') {
      this.userGuard = guard;
      return;
    }
    try {
      this.userGuard = this.moduleRef.get(guard, { strict: false });
      return;
    } catch {
      // not a provider of any module: made below
    }
    try {
      this.userGuard = await this.moduleRef.create(guard);
    } catch (error) {
      throw new JobQueueError(
        'JQ_INVALID_DASHBOARD_OPTIONS',
        `JobQueueDashboardModule: cannot make the guard ${guard.name}: add it to the providers of the module that provides its dependencies (${error instanceof Error ? error.message : String(error)})`,
      );
    }
  }

  async canActivate(context: ExecutionContext): Promise<boolean> {
    if (this.userGuard) {
      const verdict = this.userGuard.canActivate(context);
      const admitted = isObservable(verdict) ? await lastValueFrom(verdict) : await verdict;
      if (!admitted) return false;
    } else if (this.options.guard) {
      return false; // not resolved yet (never after startup): refuse rather than serve unguarded
    }
    const request = context.switchToHttp().getRequest<HttpRequest>();
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      if (this.options.readOnly) throw new ForbiddenException('the dashboard is read-only');
      checkCsrf(request);
    }
    return true;
  }
}
