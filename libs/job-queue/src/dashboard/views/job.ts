import type { Job } from '../../core/job';
import type { JobStepView } from '../dashboard-reader';
import { html, type Html } from '../html';
import { badge, duration, json, when } from './format';
import { action, layout, type PageContext } from './layout';

const UNFINISHED = ['blocked', 'waiting', 'scheduled', 'running', 'retrying'];

/**
 * One job: its actions, facts, payload, result, durable steps, progress and every failed
 * attempt; a link to its flow's page when `flowId` is given. `job` and `steps` are already redacted.
 */
export function jobPage(page: PageContext, job: Job, steps: JobStepView[] = [], flowId: string | null = null): string {
  const held = job.lockedBy !== null;
  const actions: Html[] = [];
  if (job.state === 'failed' || job.state === 'cancelled') actions.push(action(page, `jobs/${job.id}/retry`, 'Retry', { primary: true }));
  if (UNFINISHED.includes(job.state) && !job.cancelRequestedAt) {
    actions.push(action(page, `jobs/${job.id}/cancel`, 'Cancel', { danger: true, confirm: `Cancel job ${job.id}?${job.state === 'running' ? ' Its handler is told to stop.' : ''}` }));
  }
  if (!held) actions.push(action(page, `jobs/${job.id}/delete`, 'Delete', { danger: true, confirm: `Delete job ${job.id} for good?` }));
  const ran = job.startedAt && job.finishedAt ? duration(job.finishedAt.getTime() - job.startedAt.getTime()) : null;
  const progress = job.progress;

  return layout(
    page,
    'jobs',
    `Job ${job.id}`,
    html`
<h1>Job <span class="mono">#${job.id}</span> <span class="mono muted">${job.taskIdentifier}</span> ${badge(job.state)}
  ${job.cancelRequestedAt && !job.finishedAt ? html`<span class="muted" style="font-size:13px">cancel requested ${when(job.cancelRequestedAt)}</span>` : ''}
  <span class="actions">${actions}</span></h1>
<div class="grid side">
  <div>
    <section class="panel"><h2>Payload</h2><pre class="payload">${json(job.payload)}</pre></section>
    ${job.state === 'completed' ? html`<section class="panel"><h2>Result</h2><pre class="result">${json(job.result)}</pre></section>` : ''}
    ${steps.length === 0 ? '' : html`<section class="panel steps"><h2>Steps</h2>
      <table><thead><tr><th>Step</th><th>Recorded</th><th>Result</th></tr></thead><tbody>
      ${steps.map((step) => html`<tr><td class="mono">${step.name}</td><td>${when(step.createdAt)}</td><td>${step.result === undefined
        ? html`<span class="muted">—</span>` : html`<pre class="step-result">${json(step.result)}</pre>`}</td></tr>`)}
      </tbody></table></section>`}
    <section class="panel attempts"><h2>Attempts</h2>
    ${job.errors.length === 0
      ? html`<div class="empty">${job.attempts === 0 ? 'Not run yet.' : 'No attempt failed.'}</div>`
      : html`<table><thead><tr><th class="num">#</th><th>When</th><th>Code</th><th>Error</th></tr></thead><tbody>
        ${job.errors.map((e) => html`<tr><td class="num">${e.attempt}</td><td>${when(e.at)}</td><td class="mono">${e.code ?? ''}</td><td class="mono">${e.message}</td></tr>`)}
        </tbody></table>`}
    </section>
  </div>
  <section class="panel details"><h2>Details</h2>
    <dl class="facts">
      <dt>State</dt><dd>${badge(job.state)}</dd>
      <dt>Task</dt><dd class="mono"><a href="jobs?task=${encodeURIComponent(job.taskIdentifier)}">${job.taskIdentifier}</a></dd>
      <dt>Queue</dt><dd class="mono">${job.queueName ? html`<a href="jobs?queue=${encodeURIComponent(job.queueName)}">${job.queueName}</a>` : '—'}</dd>
      <dt>Key</dt><dd class="mono">${job.key ?? '—'}</dd>
      ${flowId === null ? '' : html`<dt>Flow</dt><dd class="flow"><a href="flows/${flowId}" class="mono">#${flowId}</a>${job.flowRef === null ? '' : html` <span class="muted">as</span> <span class="mono">${job.flowRef}</span>`}</dd>`}
      <dt>Attempts</dt><dd>${job.attempts} of ${job.maxAttempts}</dd>
      <dt>Priority</dt><dd>${job.priority}</dd>
      <dt>Flags</dt><dd class="mono">${job.flags.length ? job.flags.join(', ') : '—'}</dd>
      <dt>Created</dt><dd>${when(job.createdAt)}</dd>
      <dt>Run at</dt><dd>${when(job.runAt)}</dd>
      <dt>Started</dt><dd>${when(job.startedAt)}</dd>
      <dt>Finished</dt><dd>${when(job.finishedAt)}${ran ? html` <span class="muted">(ran ${ran})</span>` : ''}</dd>
      <dt>Worker</dt><dd class="mono">${job.workerId ? html`<a href="workers">${job.workerId}</a>` : '—'}</dd>
      <dt>Progress</dt><dd>${progress === null ? '—'
        : typeof progress === 'number' ? html`<div class="progress-line"><div class="bar" title="${progress}%"><i style="width:${Math.max(0, Math.min(100, progress))}%"></i></div> ${progress}%</div>`
        : html`<pre class="progress">${json(progress)}</pre>`}</dd>
      <dt>Last error</dt><dd class="mono">${job.lastError ?? '—'}</dd>
    </dl>
  </section>
</div>`,
  );
}
