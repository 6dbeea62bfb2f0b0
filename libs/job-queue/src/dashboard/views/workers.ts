import type { WorkerView } from '../dashboard-reader';
import { html } from '../html';
import { when } from './format';
import { layout, type PageContext } from './layout';

/** Every worker with a row: which process, since when, its last heartbeat, the jobs it runs. */
export function workersPage(page: PageContext, workers: WorkerView[]): string {
  return layout(
    page,
    'workers',
    'Workers',
    html`
<h1>Workers</h1>
<section class="panel">
${workers.length === 0
  ? html`<div class="empty">No worker is running.</div>`
  : html`<table><thead><tr><th>Worker</th><th>Host</th><th class="num">Pid</th><th class="num">Concurrency</th><th>Started</th><th>Last heartbeat</th><th>Running</th><th class="num">Prefetched</th></tr></thead><tbody>
    ${workers.map((w) => html`<tr data-worker="${w.id}">
      <td class="mono">${w.id}</td>
      <td class="mono">${w.hostname ?? '—'}</td>
      <td class="num">${w.pid ?? '—'}</td>
      <td class="num">${w.concurrency ?? '—'}</td>
      <td>${when(w.startedAt)}</td>
      <td>${when(w.heartbeatAt)}${w.late ? html` <span class="badge s-failed" title="older than its timeout (${w.timeoutMs} ms): about to be declared dead">late</span>` : ''}</td>
      <td class="mono">${w.runningCount === 0 ? html`<span class="zero">none</span>` : html`${w.running.map((id) => html`<a href="jobs/${id}">#${id}</a> `)}${w.runningCount > w.running.length ? `+${w.runningCount - w.running.length}` : ''}`}</td>
      <td class="num">${w.prefetchedCount}</td></tr>`)}
    </tbody></table>`}
</section>`,
    { refresh: true },
  );
}
