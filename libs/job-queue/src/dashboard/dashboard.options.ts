import type { CanActivate, Type } from '@nestjs/common';
import { JobQueueError } from '../core/errors';
import type { Job } from '../core/job';

export interface JobQueueDashboardOptions {
  /** Where the dashboard is mounted, under the app's global prefix. Default `queue`. */
  path?: string;
  /**
   * A Nest guard (class or instance) every dashboard request must pass. Required unless
   * `public: true`: the dashboard shows payloads and can retry, cancel and delete jobs. A class
   * that a module of the app provides is used as that module made it (with its dependencies);
   * any other class is made with global providers only.
   */
  guard?: Type<CanActivate> | CanActivate;
  /** Serve the dashboard with no guard of its own (the app's global guards still apply). */
  public?: boolean;
  /** Hide the actions, and refuse them. */
  readOnly?: boolean;
  /**
   * What the dashboard shows of a job: return a copy with sensitive fields of its payload,
   * result, progress or errors replaced. Called for every job a page shows, and for each
   * durable step the job page lists, with a copy of the job whose `result` is the step's.
   */
  redact?: (job: Job) => Job;
}

export interface ResolvedDashboardOptions {
  path: string;
  guard?: Type<CanActivate> | CanActivate;
  readOnly: boolean;
  redact: (job: Job) => Job;
}

export const DASHBOARD_OPTIONS = Symbol('JOB_QUEUE_DASHBOARD_OPTIONS');

const PATH = /^[A-Za-z0-9\-._~]+(\/[A-Za-z0-9\-._~]+)*$/;

function isGuard(value: unknown): value is Type<CanActivate> | CanActivate {
  if (typeof value === 'function') return typeof (value as Type<CanActivate>).prototype?.canActivate === 'function';
  return typeof (value as CanActivate | null)?.canActivate === 'function';
}

/** Checks the options when the module is declared, before the app starts: a wrong one stops it. */
export function resolveDashboardOptions(options: JobQueueDashboardOptions | undefined): ResolvedDashboardOptions {
  const { path = 'queue', guard, public: isPublic, readOnly = false, redact = (job: Job) => job } = options ?? {};
  const bad = (detail: string) => new JobQueueError('JQ_INVALID_DASHBOARD_OPTIONS', `JobQueueDashboardModule: ${detail}`);
  const trimmed = typeof path === 'string' ? path.replace(/^\/+|\/+$/g, '') : path;
  if (typeof trimmed !== 'string' || !PATH.test(trimmed) || trimmed.split('/').some((segment) => /^\.+$/.test(segment))) throw bad(`path must be a URL path such as 'admin/jobs', got ${JSON.stringify(path)}`);
  if (guard !== undefined && !isGuard(guard)) throw bad('guard must be a Nest guard: a class or an object with canActivate()');
  if (isPublic !== undefined && typeof isPublic !== 'boolean') throw bad('public must be a boolean');
  if (typeof readOnly !== 'boolean') throw bad('readOnly must be a boolean');
  if (typeof redact !== 'function') throw bad('redact must be a function (job) => job');
  if (guard && isPublic) throw bad('give a guard or public: true, not both');
  if (!guard && !isPublic) {
    throw new JobQueueError(
      'JQ_DASHBOARD_UNGUARDED',
      'JobQueueDashboardModule: give a guard (a Nest CanActivate that admits your operators), or public: true to serve it unguarded on purpose',
    );
  }
  return { path: trimmed, guard, readOnly, redact };
}
