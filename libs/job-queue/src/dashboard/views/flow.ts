import type { Flow } from '../../core/flow-steps';
import type { Job } from '../../core/job';
import { JOB_STATES } from '../../core/job-state';
import { html } from '../html';
import { flowGraph } from './flow-graph';
import { badge, when } from './format';
import { layout, type PageContext } from './layout';

/**
 * A flow (read-only): its state, a graph of its steps by depth, its jobs by state and its
 * edges (who waits for whom, with the policy and how the dependency ended). `flow.jobs` are
 * already redacted; the page shows no payload or result (each job's page does).
 */
export function flowPage(page: PageContext, flow: Flow): string {
  const byId = new Map(flow.jobs.map((job) => [job.id, job]));
  const groups = JOB_STATES.map((state) => [state, flow.jobs.filter((job) => job.state === state)] as const).filter(([, jobs]) => jobs.length > 0);
  const ref = (job: Job | undefined) => (job?.flowRef ?? html`<span class="muted">—</span>`);
  const jobLink = (id: string) => html`<a href="jobs/${id}" class="mono">#${id}</a>`;

  return layout(
    page,
    'jobs',
    `Flow ${flow.flowId}`,
    html`
<h1>Flow <span class="mono">#${flow.flowId}</span> ${badge(flow.state)}</h1>
<div class="flow-summary muted">${flow.jobs.length} job${flow.jobs.length === 1 ? '' : 's'}:
  ${groups.map(([state, jobs]) => html`<span class="flow-count">${badge(state)} ${jobs.length}</span>`)}
  · ${flow.edges.length} edge${flow.edges.length === 1 ? '' : 's'}</div>
<section class="panel flow-graph"><h2>Steps</h2>${flowGraph(flow)}</section>
<section class="panel flow-jobs"><h2>Jobs</h2>
${flow.jobs.length === 0
  ? html`<div class="empty">No job of this flow is left (retention deleted them).</div>`
  : html`<table class="jobs"><thead><tr><th>Job</th><th>Ref</th><th>Task</th><th>State</th><th class="num">Attempts</th><th>Created</th><th>Run at / finished</th><th>Last error</th></tr></thead>
    ${groups.map(([state, jobs]) => html`<tbody data-state="${state}"><tr class="group"><th colspan="8">${badge(state)} <span class="muted">${jobs.length}</span></th></tr>
      ${jobs.map((job) => html`<tr data-job="${job.id}">
        <td>${jobLink(job.id)}</td>
        <td class="mono">${ref(job)}</td>
        <td class="mono">${job.taskIdentifier}</td>
        <td>${badge(job.state)}${job.cancelRequestedAt && !job.finishedAt ? html` <span class="muted">cancelling</span>` : ''}</td>
        <td class="num">${job.attempts}/${job.maxAttempts}</td>
        <td>${when(job.createdAt)}</td>
        <td>${job.state === 'blocked' ? html`<span class="muted">when its dependencies end</span>` : when(job.finishedAt ?? job.runAt)}</td>
        <td class="err" title="${job.lastError ?? ''}">${job.lastError ?? ''}</td></tr>`)}</tbody>`)}
    </table>`}
</section>
<section class="panel flow-edges"><h2>Edges</h2>
${flow.edges.length === 0
  ? html`<div class="empty">No job of this flow waits for another.</div>`
  : html`<table class="edges"><thead><tr><th>Job</th><th>waits for</th><th>Policy</th><th>Dependency ended</th></tr></thead><tbody>
    ${flow.edges.map((edge) => html`<tr data-edge="${edge.jobId}:${edge.dependencyId}">
      <td><span class="mono">${ref(byId.get(edge.jobId))}</span> ${jobLink(edge.jobId)}</td>
      <td><span class="mono">${edge.dependencyRef}</span> ${jobLink(edge.dependencyId)}</td>
      <td class="mono">${edge.policy}</td>
      <td>${edge.state ? badge(edge.state) : html`<span class="muted">not yet</span>`}</td></tr>`)}
    </tbody></table>`}
</section>`,
  );
}
