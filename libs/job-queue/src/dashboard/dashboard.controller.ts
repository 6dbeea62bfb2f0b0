import { Controller, Get, Inject, NotFoundException, Param, Post, Query, Redirect, Req, Res, UseGuards } from '@nestjs/common';
import { TaskRegistry } from '../discovery/task-registry';
import { isJobQueueError } from '../core/errors';
import { JobQueueDatabase } from '../db/job-queue-database';
import type { Job, JobState } from '../core/job';
import { csrfToken } from './csrf';
import { DashboardGuard } from './dashboard.guard';
import { DASHBOARD_OPTIONS, type ResolvedDashboardOptions } from './dashboard.options';
import { DashboardReader } from './dashboard-reader';
import { errorCode, flashOf, type DoneCode, type ErrorCode } from './flash';
import { query } from './html';
import { cronPage } from './views/cron';
import { jobPage } from './views/job';
import { jobsPage, type JobsFilter } from './views/jobs';
import type { PageContext } from './views/layout';
import { overviewPage } from './views/overview';
import { workersPage } from './views/workers';
import { baseOf, setHeaders, HTML_HEADERS, type HttpRequest } from './http';

const JOB_ID = /^[1-9][0-9]{0,18}$/;

/** What an action did: a code of flash.ts (`done` or `error`), its number, and the page to show it on if not the default. */
interface ActionOutcome {
  done?: DoneCode;
  n?: string;
  error?: ErrorCode;
  to?: string;
}

/**
 * The dashboard's pages (GET) and actions (POST, then a 303 redirect to a page). Ordinary
 * Nest routes: the app's global prefix, guards and interceptors apply, and DashboardGuard
 * adds the `guard` option's guard, read-only mode and the cross-site check.
 */
@Controller()
@UseGuards(DashboardGuard)
export class DashboardController {
  constructor(
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
    private readonly reader: DashboardReader,
    private readonly db: JobQueueDatabase,
    private readonly tasks: TaskRegistry,
  ) {}

  @Get()
  async overview(@Req() request: HttpRequest, @Res({ passthrough: true }) response: unknown, @Query() params: Record<string, string>): Promise<string> {
    const data = await this.reader.overview();
    // the heads' errors go through redact like every other job text the dashboard shows
    const heads = new Map(this.redacted(await this.reader.jobsById(data.blocked.map((b) => b.headId))).map((job) => [job.id, job]));
    const blocked = data.blocked.map((b) => ({ ...b, lastError: heads.get(b.headId)?.lastError ?? null }));
    return overviewPage(this.page(request, response, 0, params), { ...data, blocked });
  }

  @Get('jobs')
  async list(@Req() request: HttpRequest, @Res({ passthrough: true }) response: unknown, @Query() params: Record<string, string>): Promise<string> {
    const page = this.page(request, response, 1, params);
    const filter: JobsFilter = { state: params.state || undefined, task: params.task || undefined, queue: params.queue || undefined, q: params.q || undefined, cursor: params.cursor || undefined };
    const tasks = await this.taskNames(filter.task);
    try {
      if (filter.q) return jobsPage(page, filter, tasks, this.redacted(await this.reader.find(filter.q)), null);
      const { jobs, nextCursor } = await this.reader.jobs.listJobs({ state: filter.state as JobState | undefined, task: filter.task, queue: filter.queue, cursor: filter.cursor, limit: 50 });
      return jobsPage(page, filter, tasks, this.redacted(jobs), nextCursor);
    } catch (error) {
      if (!isJobQueueError(error)) throw error;
      return jobsPage(page, filter, tasks, [], null, error.message);
    }
  }

  @Get('jobs/:id')
  async job(@Req() request: HttpRequest, @Res({ passthrough: true }) response: unknown, @Param('id') id: string, @Query() params: Record<string, string>): Promise<string> {
    if (!JOB_ID.test(id)) throw new NotFoundException(`job ${id} not found`);
    const [job, steps] = await Promise.all([this.reader.jobs.getJob(id), this.reader.steps(id)]);
    if (!job) throw new NotFoundException(`job ${id} not found`);
    // each step's result goes through redact as the job's result would (a copy of the job carrying it)
    const redactedSteps = steps.map((step) => ({ ...step, result: this.options.redact({ ...job, result: step.result }).result }));
    return jobPage(this.page(request, response, 2, params), this.redacted([job])[0], redactedSteps);
  }

  @Get('cron')
  async cron(@Req() request: HttpRequest, @Res({ passthrough: true }) response: unknown, @Query() params: Record<string, string>): Promise<string> {
    return cronPage(this.page(request, response, 1, params), await this.reader.schedules());
  }

  @Get('workers')
  async workers(@Req() request: HttpRequest, @Res({ passthrough: true }) response: unknown, @Query() params: Record<string, string>): Promise<string> {
    return workersPage(this.page(request, response, 1, params), await this.reader.workers());
  }

  @Post('jobs/:id/retry')
  @Redirect()
  async retry(@Req() request: HttpRequest, @Param('id') id: string) {
    return this.act(request, 3, `jobs/${id}`, async () => {
      const [job] = await this.reader.jobs.retryJobs([this.jobId(id)]);
      if (!job) return { error: 'not-retryable' };
      return { done: 'retried' };
    });
  }

  @Post('jobs/:id/cancel')
  @Redirect()
  async cancel(@Req() request: HttpRequest, @Param('id') id: string) {
    return this.act(request, 3, `jobs/${id}`, async () => {
      await this.reader.jobs.cancelJob(this.jobId(id), 'cancelled from the dashboard');
      return { done: 'cancelled' };
    });
  }

  @Post('jobs/:id/delete')
  @Redirect()
  async delete(@Req() request: HttpRequest, @Param('id') id: string) {
    return this.act(request, 3, `jobs/${id}`, async () => {
      await this.reader.jobs.deleteJob(this.jobId(id));
      return { done: 'deleted', n: id, to: 'jobs' };
    });
  }

  @Post('tasks/:task/retry-failed')
  @Redirect()
  async retryFailed(@Req() request: HttpRequest, @Param('task') task: string) {
    return this.act(request, 3, '', async () => ({ done: 'retried-failed', n: String(await this.reader.jobs.retryFailedJobs(task)) }));
  }

  /** Runs an action and redirects (303) to `to` with what happened, as codes (flash.ts); a JobQueueError shows on that page. */
  private async act(request: HttpRequest, depth: number, to: string, run: () => Promise<ActionOutcome>) {
    const base = baseOf(request, depth);
    let outcome: ActionOutcome;
    try {
      outcome = await run();
    } catch (error) {
      if (!isJobQueueError(error)) throw error;
      outcome = { error: errorCode(error) };
    }
    const page = outcome.to ?? to;
    // the overview at the root's own path: Fastify has no route for it with a trailing slash
    return { url: `${page ? `${base}/${page}` : base || '/'}${query({ done: outcome.done, n: outcome.n, error: outcome.error })}`, statusCode: 303 };
  }

  private jobId(id: string): string {
    if (!JOB_ID.test(id)) throw new NotFoundException(`job ${id} not found`);
    return id;
  }

  /** What every page needs: its base path, a form token (set as a cookie if new), the flash message; and the page's headers. */
  private page(request: HttpRequest, response: unknown, depth: number, params: Record<string, string>): PageContext {
    const base = baseOf(request, depth);
    const { token, setCookie } = csrfToken(request, base);
    setHeaders(response, { ...HTML_HEADERS, ...(setCookie ? { 'Set-Cookie': setCookie } : {}) });
    return { base, csrf: token, readOnly: this.options.readOnly, flash: flashOf(params) };
  }

  private redacted(jobs: Job[]): Job[] {
    return jobs.map((job) => this.options.redact(job));
  }

  /** The tasks to filter by: this app's, those with finished jobs, and the one filtered on. */
  private async taskNames(current?: string): Promise<string[]> {
    const finished = await this.db.run<{ task_identifier: string }>('finishedTasks', []);
    const names = new Set([...this.tasks.identifiers(), ...finished.map((row) => row.task_identifier), ...(current ? [current] : [])]);
    return [...names].sort();
  }
}
