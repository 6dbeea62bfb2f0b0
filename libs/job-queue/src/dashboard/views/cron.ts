import type { ScheduleView } from '../dashboard-reader';
import { html, query } from '../html';
import { badge, duration, when } from './format';
import { action, layout, type PageContext } from './layout';

/** When a schedule ticks: its cron expression, or its interval. */
function timing(s: ScheduleView) {
  if (s.every !== null) return html`every ${duration(s.every)}`;
  return s.cron ?? html`<span class="muted" title="declared by an older version of the library">unknown</span>`;
}

/** Pause or resume, as a form with the page's form token (none on a read-only dashboard). */
function toggle(page: PageContext, s: ScheduleView) {
  const path = `cron/${encodeURIComponent(s.id)}/${s.paused ? 'resume' : 'pause'}`;
  return action(page, path, s.paused ? 'Resume' : 'Pause', s.paused ? { primary: true } : { confirm: `Pause schedule ${s.id}? Its ticks are skipped until it is resumed.` });
}

/** Every schedule: declared in code by any replica (@Cron, crontab) or given at run time (upsertSchedule), with its last and next tick. */
export function cronPage(page: PageContext, schedules: ScheduleView[]): string {
  return layout(
    page,
    'cron',
    'Cron',
    html`
<h1>Cron schedules</h1>
<section class="panel">
${schedules.length === 0
  ? html`<div class="empty">No schedule: put <code>@Cron()</code> on a <code>@Task()</code> method, use the <code>crontab</code> option, or call <code>upsertSchedule()</code>.</div>`
  : html`<table><thead><tr><th>Schedule</th><th>Task</th><th>When</th><th>Time zone</th><th>Last tick</th><th>Next tick</th><th>Declared</th><th>Source</th><th>State</th><th></th></tr></thead><tbody>
    ${schedules.map((s) => html`<tr data-schedule="${s.id}" data-paused="${s.paused ? 'yes' : 'no'}">
      <td class="mono">${s.id}</td>
      <td class="mono">${s.identifier ? html`<a href="jobs${query({ task: s.identifier })}">${s.identifier}</a>` : html`<span class="muted">—</span>`}</td>
      <td class="mono">${timing(s)}</td>
      <td>${s.timeZone ?? '—'}</td>
      <td>${when(s.lastTick)}</td>
      <td>${when(s.nextTick)}</td>
      <td title="when a replica last started with this schedule, or it was last upserted; known since ${s.knownSince.toISOString()}">${when(s.registeredAt)}</td>
      <td>${s.declaredInCode ? 'code' : 'run time'}</td>
      <td>${badge(s.paused ? 'paused' : 'active')}</td>
      <td class="actions">${toggle(page, s)}</td></tr>`)}
    </tbody></table>`}
</section>
<p class="muted">Each tick becomes one job across all replicas. A paused schedule skips its ticks until it is resumed. A schedule declared in code stays listed after it is removed from the code; its "declared" time then stops moving. Run-time schedules are removed with <code>removeSchedule()</code>.</p>`,
    { refresh: true },
  );
}
