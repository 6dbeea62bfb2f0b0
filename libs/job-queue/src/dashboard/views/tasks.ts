import type { EffectiveLimits } from '../../core/limits';
import type { TasksView } from '../dashboard-reader';
import { html, query, type Html } from '../html';
import { badge, count, duration, when } from './format';
import { action, layout, type PageContext } from './layout';

const ALL = '*';

/** A task's limits, the task's own then its groups', as a cell says them. */
function describe(limits: EffectiveLimits): Html {
  const parts = [
    limits.concurrency !== undefined ? `${limits.concurrency} at once` : '',
    limits.rate !== undefined ? `${limits.rate.max} per ${duration(limits.rate.perMs)}` : '',
    limits.groupConcurrency !== undefined ? `${limits.groupConcurrency} at once per group` : '',
    limits.groupRate !== undefined ? `${limits.groupRate.max} per ${duration(limits.groupRate.perMs)} per group` : '',
  ].filter(Boolean);
  return parts.length === 0 ? html`<span class="muted">none</span>` : html`${parts.join(', ')}`;
}

/** The form that sets every limit of a task (an empty field: no limit), prefilled with those in force. */
function limitsForm(page: PageContext, task: string, limits: EffectiveLimits): Html {
  if (page.readOnly) return html``;
  return html`<form method="post" action="tasks/${encodeURIComponent(task)}/limits" class="limits">
<input type="hidden" name="_csrf" value="${page.csrf}">
<label>at once <input name="globalConcurrency" inputmode="numeric" size="4" value="${limits.concurrency ?? ''}" aria-label="globalConcurrency of ${task}"></label>
<label>rate <input name="rateMax" inputmode="numeric" size="4" value="${limits.rate?.max ?? ''}" aria-label="rate max of ${task}"></label>
<label>per <input name="ratePer" size="5" value="${limits.rate ? `${limits.rate.perMs}` : ''}" placeholder="1s" aria-label="rate period of ${task}"></label>
<label>per group: at once <input name="groupConcurrency" inputmode="numeric" size="4" value="${limits.groupConcurrency ?? ''}" aria-label="groupConcurrency of ${task}"></label>
<label>rate <input name="groupRateMax" inputmode="numeric" size="4" value="${limits.groupRate?.max ?? ''}" aria-label="group rate max of ${task}"></label>
<label>per <input name="groupRatePer" size="5" value="${limits.groupRate ? `${limits.groupRate.perMs}` : ''}" placeholder="1s" aria-label="group rate period of ${task}"></label>
<button type="submit">Set</button>
</form>`;
}

/**
 * Every task this app runs or has limits set for: its jobs, its state (active, paused, held by
 * ctx.rateLimited until a time), its limits (in force; the decorator's, and what was set at run
 * time), with buttons to pause, resume, set and reset them; then the paused named queues.
 */
export function tasksPage(page: PageContext, view: TasksView): string {
  const pausedTasks = new Map(view.paused.filter((p) => p.kind === 'task').map((p) => [p.name, p]));
  const queues = view.paused.filter((p) => p.kind === 'queue');
  const all = pausedTasks.get(ALL);
  return layout(
    page,
    'tasks',
    'Tasks',
    html`
<h1>Tasks</h1>
${all
  ? html`<div class="flash error" data-paused-all="yes">Every task is paused (since ${when(all.since)}). ${action(page, `tasks/${encodeURIComponent(ALL)}/resume`, 'Resume all', { primary: true })}</div>`
  : html`<p>${action(page, `tasks/${encodeURIComponent(ALL)}/pause`, 'Pause every task', { danger: true, confirm: 'Pause every task on every replica? Running jobs finish; nothing starts until you resume.' })}</p>`}
<section class="panel">
${view.limits.length === 0
  ? html`<div class="empty">No task: put <code>@Task()</code> on a provider method.</div>`
  : html`<table><thead><tr><th>Task</th><th>Waiting</th><th>Running</th><th>State</th><th>Limits in force</th><th>Declared</th><th>Set at run time</th><th></th></tr></thead><tbody>
    ${view.limits.map((entry) => {
      const paused = pausedTasks.get(entry.task);
      const counts = view.counts[entry.task];
      const state = paused === undefined ? 'active' : paused.until ? 'held' : 'paused';
      return html`<tr data-task="${entry.task}" data-state="${state}">
      <td class="mono"><a href="jobs${query({ task: entry.task })}">${entry.task}</a></td>
      <td>${count((counts?.waiting ?? 0) + (counts?.scheduled ?? 0) + (counts?.retrying ?? 0))}</td>
      <td>${count(counts?.running ?? 0)}</td>
      <td>${badge(state)}${paused?.until ? html` <span class="muted">until ${when(paused.until)}</span>` : ''}</td>
      <td data-limits>${describe(entry.limits)}</td>
      <td>${describe(entry.declared)}</td>
      <td>${entry.override ? html`yes ${action(page, `tasks/${encodeURIComponent(entry.task)}/reset-limits`, 'Reset')}` : html`<span class="muted">no</span>`}</td>
      <td class="actions">${paused
        ? action(page, `tasks/${encodeURIComponent(entry.task)}/resume`, 'Resume', { primary: true })
        : action(page, `tasks/${encodeURIComponent(entry.task)}/pause`, 'Pause', { confirm: `Pause task ${entry.task} on every replica? Running jobs finish; its jobs wait until you resume.` })}
        ${limitsForm(page, entry.task, entry.limits)}</td></tr>`;
    })}
    </tbody></table>`}
</section>
<h2>Paused queues</h2>
<section class="panel">
${queues.length === 0
  ? html`<div class="empty">No named queue is paused.</div>`
  : html`<table><thead><tr><th>Queue</th><th>Since</th><th></th></tr></thead><tbody>
    ${queues.map((q) => html`<tr data-queue="${q.name}"><td class="mono">${q.name}</td><td>${when(q.since)}</td><td class="actions">${action(page, `queues/${encodeURIComponent(q.name)}/resume`, 'Resume', { primary: true })}</td></tr>`)}
    </tbody></table>`}
${page.readOnly
  ? ''
  : html`<form method="post" action="queues/pause" class="limits"><input type="hidden" name="_csrf" value="${page.csrf}"><label>queue <input name="queue" size="20" aria-label="queue to pause"></label><button type="submit">Pause queue</button></form>`}
</section>
<p class="muted">Pauses and limits are kept in the database and apply to every replica within a moment (at most the poll interval). A task held by <code>ctx.rateLimited()</code> starts again by itself at the time shown. The limits form sets every limit, the task's and each group's (the job spec <code>group</code>): an empty field means no limit, a period is ms or a duration such as 1s or 1m. Reset goes back to the limits the task declares in code.</p>`,
    { refresh: true },
  );
}
