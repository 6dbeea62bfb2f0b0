import { Body, Controller, Get, Inject, Param, Post, Query, Redirect, Req, Res, UseGuards } from '@nestjs/common';
import { JobQueueError } from '../core/errors';
import type { RateLimit, TaskLimitsOverride } from '../core/limits';
import { DashboardGuard } from './dashboard.guard';
import { DASHBOARD_OPTIONS, type ResolvedDashboardOptions } from './dashboard.options';
import { DashboardReader } from './dashboard-reader';
import type { HttpRequest } from './http';
import { pageContext, runAction } from './page-context';
import { tasksPage } from './views/tasks';

/** A form field as text ('' when absent). */
const field = (body: Record<string, unknown> | undefined, name: string) => (typeof body?.[name] === 'string' ? (body[name] as string).trim() : '');

/** A form's number as a number; text that is none stays text, so that setTaskLimits refuses it with JQ_INVALID_LIMIT, as it refuses anything else. */
const number = (text: string) => (/^-?[0-9]+(\.[0-9]+)?$/.test(text) ? Number(text) : text) as number;

/** A concurrency field: null when empty (no limit). */
const concurrencyField = (body: Record<string, unknown> | undefined, name: string) => (field(body, name) === '' ? null : number(field(body, name)));

/** A rate's two fields: null when both are empty; one without the other is refused. */
function rateFields(body: Record<string, unknown> | undefined, maxName: string, perName: string): RateLimit | null {
  const max = field(body, maxName);
  const per = field(body, perName);
  if ((max === '') !== (per === '')) throw new JobQueueError('JQ_INVALID_LIMIT', 'a rate limit needs both its max and its period');
  return max === '' ? null : { max: number(max), per: number(per) };
}

/** The limits the tasks page's form sets: every one of them, an empty field meaning no limit. */
export function limitsFromForm(body: Record<string, unknown> | undefined): TaskLimitsOverride {
  return {
    globalConcurrency: concurrencyField(body, 'globalConcurrency'),
    rateLimit: rateFields(body, 'rateMax', 'ratePer'),
    groupConcurrency: concurrencyField(body, 'groupConcurrency'),
    groupRateLimit: rateFields(body, 'groupRateMax', 'groupRatePer'),
  };
}

/**
 * The dashboard's tasks page (limits and pauses) and its actions: pause and resume a task or
 * a named queue ('*' for every task), set a task's limits at run time and reset them. The
 * same guard as every page: read-only dashboards refuse the actions, and show no button.
 */
@Controller()
@UseGuards(DashboardGuard)
export class DashboardTasksController {
  constructor(
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
    private readonly reader: DashboardReader,
  ) {}

  @Get('tasks')
  async tasks(@Req() request: HttpRequest, @Res({ passthrough: true }) response: unknown, @Query() params: Record<string, string>): Promise<string> {
    const page = pageContext(request, response, 1, params, this.options.readOnly);
    return tasksPage(page, await this.reader.tasks());
  }

  @Post('tasks/:task/pause')
  @Redirect()
  async pauseTask(@Req() request: HttpRequest, @Param('task') task: string) {
    return runAction(request, 3, 'tasks', async () => (await this.reader.jobs.pauseTask(task), { done: 'task-paused' }));
  }

  @Post('tasks/:task/resume')
  @Redirect()
  async resumeTask(@Req() request: HttpRequest, @Param('task') task: string) {
    return runAction(request, 3, 'tasks', async () => (await this.reader.jobs.resumeTask(task), { done: 'task-resumed' }));
  }

  @Post('tasks/:task/limits')
  @Redirect()
  async setLimits(@Req() request: HttpRequest, @Param('task') task: string, @Body() body: Record<string, unknown> | undefined) {
    return runAction(request, 3, 'tasks', async () => (await this.reader.jobs.setTaskLimits(task, limitsFromForm(body)), { done: 'limits-set' }));
  }

  @Post('tasks/:task/reset-limits')
  @Redirect()
  async resetLimits(@Req() request: HttpRequest, @Param('task') task: string) {
    return runAction(request, 3, 'tasks', async () => (await this.reader.jobs.resetTaskLimits(task), { done: 'limits-reset' }));
  }

  @Post('queues/pause')
  @Redirect()
  async pauseQueue(@Req() request: HttpRequest, @Body() body: Record<string, unknown> | undefined) {
    return runAction(request, 2, 'tasks', async () => (await this.reader.jobs.pauseQueue(field(body, 'queue')), { done: 'queue-paused' }));
  }

  @Post('queues/:queue/resume')
  @Redirect()
  async resumeQueue(@Req() request: HttpRequest, @Param('queue') queue: string) {
    return runAction(request, 3, 'tasks', async () => (await this.reader.jobs.resumeQueue(queue), { done: 'queue-resumed' }));
  }
}
