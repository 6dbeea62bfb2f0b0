import type { JobCounts, JobCountsReport } from '../../service/job-queue.service';
import { JOB_STATES } from '../../core/job-state';
import type { BlockedQueue, MinuteCounts } from '../dashboard-reader';
import { html, query } from '../html';
import { minuteChart } from './chart';
import { count, when } from './format';
import { action, layout, type PageContext } from './layout';

export function overviewPage(page: PageContext, data: { counts: JobCountsReport; perMinute: MinuteCounts[]; blocked: BlockedQueue[] }): string {
  const { counts, perMinute, blocked } = data;
  const lastHour = perMinute.reduce((sum, m) => ({ completed: sum.completed + m.completed, failed: sum.failed + m.failed }), { completed: 0, failed: 0 });
  const tasks = Object.entries(counts.byTask).sort(([a], [b]) => a.localeCompare(b));
  const queues = Object.entries(counts.byQueue).sort(([a], [b]) => a.localeCompare(b));
  const stateRow = (filter: { task?: string; queue?: string }, c: JobCounts) =>
    JOB_STATES.map((state) => html`<td class="num">${c[state] ? html`<a href="jobs${query({ ...filter, state })}">${count(c[state])}</a>` : count(0)}</td>`);
  const stateHeads = JOB_STATES.map((state) => html`<th class="num">${state}</th>`);

  return layout(
    page,
    'overview',
    'Overview',
    html`
<h1>Overview</h1>
<div class="cards">
  ${JOB_STATES.map((state) => html`<a class="card s-${state}" href="jobs${query({ state })}"><div class="n">${counts.byState[state].toLocaleString('en-US')}</div><div class="l">${state}</div></a>`)}
</div>
<div class="grid side">
  <section class="panel chart">
    <h2>Finished per minute, last hour</h2>
    ${minuteChart(perMinute)}
    <div class="legend"><span><i style="background:#16a34a"></i>completed ${lastHour.completed.toLocaleString('en-US')}</span><span><i style="background:#dc2626"></i>failed ${lastHour.failed.toLocaleString('en-US')}</span><span>(finished jobs that retention still keeps)</span></div>
  </section>
  <section class="panel blocked">
    <h2>Queues held up</h2>
    ${blocked.length === 0
      ? html`<div class="empty">No named queue is waiting behind a failing job.</div>`
      : html`<table><thead><tr><th>Queue</th><th>Failing head</th><th class="num">Behind it</th></tr></thead><tbody>
        ${blocked.map((b) => html`<tr>
          <td><a href="jobs${query({ queue: b.queue })}">${b.queue}</a></td>
          <td><a href="jobs/${b.headId}">#${b.headId}</a> ${b.task} · attempt ${b.attempts}/${b.maxAttempts}, retry ${when(b.runAt)}<div class="err" title="${b.lastError ?? ''}">${b.lastError ?? ''}</div></td>
          <td class="num">${count(b.behind)}</td></tr>`)}
        </tbody></table>`}
  </section>
</div>
<section class="panel tasks">
  <h2>Tasks</h2>
  ${tasks.length === 0
    ? html`<div class="empty">No jobs yet.</div>`
    : html`<table><thead><tr><th>Task</th>${stateHeads}<th></th></tr></thead><tbody>
      ${tasks.map(([task, c]) => html`<tr><td><a href="jobs${query({ task })}" class="mono">${task}</a></td>${stateRow({ task }, c)}
        <td class="num">${c.failed > 0 ? action(page, `tasks/${encodeURIComponent(task)}/retry-failed`, `Retry ${c.failed} failed`, { confirm: `Retry every failed job of ${task}?` }) : ''}</td></tr>`)}
      </tbody></table>`}
</section>
${queues.length === 0
  ? ''
  : html`<section class="panel"><h2>Named queues</h2><table><thead><tr><th>Queue</th>${stateHeads}</tr></thead><tbody>
    ${queues.map(([queue, c]) => html`<tr><td><a href="jobs${query({ queue })}" class="mono">${queue}</a></td>${stateRow({ queue }, c)}</tr>`)}
    </tbody></table></section>`}`,
    { refresh: true },
  );
}
