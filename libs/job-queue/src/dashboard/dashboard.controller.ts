import { Controller, Get, Inject, NotFoundException, Param, Post, Query, Redirect, Req, Res, UseGuards } from '@nestjs/common';
import { TaskRegistry } from '../discovery/task-registry';
import { isJobQueueError } from '../core/errors';
import { JobQueueDatabase } from '../db/job-queue-database';
import type { Job, JobState } from '../core/job';
import { DashboardGuard } from './dashboard.guard';
import { DASHBOARD_OPTIONS, type ResolvedDashboardOptions } from './dashboard.options';
import { DashboardReader } from './dashboard-reader';
import { cronPage } from './views/cron';
import { flowPage } from './views/flow';
import { jobPage } from './views/job';
import { jobsPage, type JobsFilter } from './views/jobs';
import type { PageContext } from './views/layout';
import { overviewPage } from './views/overview';
import { workersPage } from './views/workers';
import type { HttpRequest } from './http';
import { pageContext, runAction } from './page-context';

const JOB_ID = /^[1-9][0-9]{0,18}$/;

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
    return jobPage(this.page(request, response, 2, params), this.redacted([job])[0], redactedSteps, await this.reader.flowOf(job));
  }

  @Get('flows/:id')
  async flow(@Req() request: HttpRequest, @Res({ passthrough: true }) response: unknown, @Param('id') id: string, @Query() params: Record<string, string>): Promise<string> {
    if (!JOB_ID.test(id)) throw new NotFoundException(`flow ${id} not found`);
    const flow = await this.reader.flow(id);
    if (!flow) throw new NotFoundException(`flow ${id} not found`);
    return flowPage(this.page(request, response, 2, params), { ...flow, jobs: this.redacted(flow.jobs) });
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
    return runAction(request, 3, `jobs/${id}`, async () => {
      const [job] = await this.reader.jobs.retryJobs([this.jobId(id)]);
      if (!job) return { error: 'not-retryable' };
      return { done: 'retried' };
    });
  }

  @Post('jobs/:id/cancel')
  @Redirect()
  async cancel(@Req() request: HttpRequest, @Param('id') id: string) {
    return runAction(request, 3, `jobs/${id}`, async () => {
      await this.reader.jobs.cancelJob(this.jobId(id), 'cancelled from the dashboard');
      return { done: 'cancelled' };
    });
  }

  @Post('jobs/:id/delete')
  @Redirect()
  async delete(@Req() request: HttpRequest, @Param('id') id: string) {
    return runAction(request, 3, `jobs/${id}`, async () => {
      await this.reader.jobs.deleteJob(this.jobId(id));
      return { done: 'deleted', n: id, to: 'jobs' };
    });
  }

  @Post('tasks/:task/retry-failed')
  @Redirect()
  async retryFailed(@Req() request: HttpRequest, @Param('task') task: string) {
    return runAction(request, 3, '', async () => ({ done: 'retried-failed', n: String(await this.reader.jobs.retryFailedJobs(task)) }));
  }

  @Post('cron/:id/pause')
  @Redirect()
  async pauseSchedule(@Req() request: HttpRequest, @Param('id') id: string) {
    return runAction(request, 3, 'cron', async () => {
      await this.reader.jobs.pauseSchedule(id);
      return { done: 'schedule-paused' };
    });
  }

  @Post('cron/:id/resume')
  @Redirect()
  async resumeSchedule(@Req() request: HttpRequest, @Param('id') id: string) {
    return runAction(request, 3, 'cron', async () => {
      await this.reader.jobs.resumeSchedule(id);
      return { done: 'schedule-resumed' };
    });
  }

  private jobId(id: string): string {
    if (!JOB_ID.test(id)) throw new NotFoundException(`job ${id} not found`);
    return id;
  }

  private page(request: HttpRequest, response: unknown, depth: number, params: Record<string, string>): PageContext {
    return pageContext(request, response, depth, params, this.options.readOnly);
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
