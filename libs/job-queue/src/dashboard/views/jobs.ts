import type { Job } from '../../core/job';
import { JOB_STATES } from '../../core/job-state';
import { html, query } from '../html';
import { badge, when } from './format';
import { layout, type PageContext } from './layout';

export interface JobsFilter {
  state?: string;
  task?: string;
  queue?: string;
  /** An id or a job key. */
  q?: string;
  cursor?: string;
}

/** The list of jobs: filters, a table, the next page. */
export function jobsPage(page: PageContext, filter: JobsFilter, tasks: string[], jobs: Job[], nextCursor: string | null, error?: string): string {
  const { cursor: _, ...kept } = filter;
  return layout(
    page,
    'jobs',
    'Jobs',
    html`
<h1>Jobs</h1>
<form class="filters" method="get" action="jobs">
  <label>State<select name="state"><option value="">any</option>${JOB_STATES.map((state) => html`<option value="${state}"${state === filter.state ? html` selected` : ''}>${state}</option>`)}</select></label>
  <label>Task<select name="task"><option value="">any</option>${tasks.map((task) => html`<option${task === filter.task ? html` selected` : ''}>${task}</option>`)}</select></label>
  <label>Queue<input name="queue" value="${filter.queue ?? ''}" placeholder="any"></label>
  <label>Id or key<input name="q" value="${filter.q ?? ''}" placeholder="42 or invoice:7"></label>
  <button type="submit" class="primary">Filter</button>
  ${filter.state || filter.task || filter.queue || filter.q ? html`<a href="jobs" class="button">Clear</a>` : ''}
</form>
${error ? html`<div class="flash error">${error}</div>` : ''}
<section class="panel">
${jobs.length === 0
  ? html`<div class="empty">No job matches.</div>`
  : html`<table class="jobs"><thead><tr><th>Id</th><th>Task</th><th>State</th><th>Queue</th><th class="num">Attempts</th><th>Created</th><th>Run at / finished</th><th>Last error</th></tr></thead><tbody>
    ${jobs.map((job) => html`<tr data-job="${job.id}">
      <td class="mono"><a href="jobs/${job.id}">#${job.id}</a></td>
      <td class="mono">${job.taskIdentifier}</td>
      <td>${badge(job.state)}${job.cancelRequestedAt && !job.finishedAt ? html` <span class="muted">cancelling</span>` : ''}</td>
      <td class="mono">${job.queueName ?? html`<span class="muted">—</span>`}</td>
      <td class="num">${job.attempts}/${job.maxAttempts}</td>
      <td>${when(job.createdAt)}</td>
      <td>${when(job.finishedAt ?? job.runAt)}</td>
      <td class="err" title="${job.lastError ?? ''}">${job.lastError ?? ''}</td></tr>`)}
    </tbody></table>`}
${nextCursor ? html`<div class="pager"><a class="button" href="jobs${query({ ...kept, cursor: nextCursor })}">Next page →</a></div>` : ''}
</section>`,
  );
}
