import type { ScheduleView } from '../dashboard-reader';
import { html, query } from '../html';
import { when } from './format';
import { layout, type PageContext } from './layout';

/** Every schedule any replica declared (known_crontabs), with its last and next tick. */
export function cronPage(page: PageContext, schedules: ScheduleView[]): string {
  return layout(
    page,
    'cron',
    'Cron',
    html`
<h1>Cron schedules</h1>
<section class="panel">
${schedules.length === 0
  ? html`<div class="empty">No schedule: put <code>@Cron()</code> on a <code>@Task()</code> method, or use the <code>crontab</code> option.</div>`
  : html`<table><thead><tr><th>Schedule</th><th>Task</th><th>Expression</th><th>Time zone</th><th>Last tick</th><th>Next tick</th><th>Declared</th></tr></thead><tbody>
    ${schedules.map((s) => html`<tr data-schedule="${s.identifier}">
      <td class="mono">${s.identifier}</td>
      <td class="mono">${s.task ? html`<a href="jobs${query({ task: s.task })}">${s.task}</a>` : html`<span class="muted">—</span>`}</td>
      <td class="mono">${s.expression ?? html`<span class="muted" title="declared by an older version of the library">unknown</span>`}</td>
      <td>${s.timeZone ?? '—'}</td>
      <td>${when(s.lastTick)}</td>
      <td>${when(s.nextTick)}</td>
      <td title="when a replica last started with this schedule; known since ${s.knownSince.toISOString()}">${when(s.registeredAt)}</td></tr>`)}
    </tbody></table>`}
</section>
<p class="muted">Each tick becomes one job across all replicas. A schedule stays listed after it is removed from the code; its "declared" time then stops moving.</p>`,
    { refresh: true },
  );
}
