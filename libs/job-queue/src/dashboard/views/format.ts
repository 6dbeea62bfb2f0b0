import { html, type Html } from '../html';
import type { JobState } from '../../core/job';

/** "12 s ago", "in 3 min": how far `date` is from `now`, roughly. */
export function relative(date: Date, now = Date.now()): string {
  const ms = date.getTime() - now;
  const abs = Math.abs(ms);
  const text =
    abs < 1_000 ? 'now'
    : abs < 60_000 ? `${Math.round(abs / 1_000)} s`
    : abs < 3_600_000 ? `${Math.round(abs / 60_000)} min`
    : abs < 86_400_000 ? `${Math.round(abs / 3_600_000)} h`
    : `${Math.round(abs / 86_400_000)} d`;
  if (text === 'now') return text;
  return ms < 0 ? `${text} ago` : `in ${text}`;
}

/** A time as "3 min ago", with the exact UTC time on hover. */
export function when(date: Date | null | undefined): Html {
  if (!date) return html`<span class="muted">—</span>`;
  return html`<time datetime="${date.toISOString()}" title="${date.toISOString()}">${relative(date)}</time>`;
}

/** 850 ms, 12.3 s, 4 min 5 s. */
export function duration(ms: number): string {
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60_000);
  return minutes < 60 ? `${minutes} min ${Math.round((ms % 60_000) / 1_000)} s` : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

export function badge(state: JobState | string): Html {
  return html`<span class="badge s-${state}">${state}</span>`;
}

/** A count, greyed out when zero. */
export function count(n: number): Html {
  return n === 0 ? html`<span class="zero">0</span>` : html`${n.toLocaleString('en-US')}`;
}

/** Pretty JSON for a <pre>. */
export function json(value: unknown): string {
  return value === undefined ? 'undefined' : JSON.stringify(value, null, 2);
}
