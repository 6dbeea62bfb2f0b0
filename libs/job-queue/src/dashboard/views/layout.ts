import { html, type Html } from '../html';

export type Section = 'overview' | 'jobs' | 'tasks' | 'cron' | 'workers';

export interface PageContext {
  /** The dashboard's root URL path, e.g. `/api/jobs`: every link is relative to it (<base>). */
  base: string;
  /** The form token every action form carries (csrf.ts). */
  csrf: string;
  readOnly: boolean;
  /** A message after an action (?done= / ?error=). */
  flash?: { text: string; error: boolean };
}

/** Each section's page, relative to <base>; '' is the overview, at the dashboard's root (see rootHref). */
const SECTIONS: Array<[Section, string, string]> = [
  ['overview', 'Overview', ''],
  ['jobs', 'Jobs', 'jobs'],
  ['tasks', 'Tasks', 'tasks'],
  ['cron', 'Cron', 'cron'],
  ['workers', 'Workers', 'workers'],
];

/** The page around a section's content: navigation, flash message, assets. */
export function layout(page: PageContext, section: Section, title: string, content: Html, { refresh = false } = {}): string {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<base href="${page.base}/">
<title>${title} · Job queue</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="assets/dashboard.css">
<script src="assets/dashboard.js" defer></script>
</head>
<body>
<header class="top">
  <a class="brand" href="${rootHref(page)}">Job queue</a>
  <nav>${SECTIONS.map(([id, label, href]) => html`<a href="${href || rootHref(page)}" class="${id === section ? 'on' : ''}">${label}</a>`)}</nav>
  <div class="right">
    ${page.readOnly ? html`<span>read-only</span>` : ''}
    ${refresh ? html`<label><input type="checkbox" id="autorefresh"> auto-refresh</label>` : ''}
  </div>
</header>
<main>
${page.flash ? html`<div class="flash${page.flash.error ? ' error' : ''}" role="status">${page.flash.text}</div>` : ''}
${content}
</main>
</body>
</html>`.text;
}

/**
 * The dashboard's root, the overview: its path itself, not `.` (which <base> makes the path
 * with a trailing slash, a route Fastify does not have: 404).
 */
export function rootHref(page: PageContext): string {
  return page.base || '/';
}

/** A POST form with one button: an action. Nothing in read-only mode. */
export function action(page: PageContext, path: string, label: string, { danger = false, primary = false, confirm }: { danger?: boolean; primary?: boolean; confirm?: string } = {}): Html {
  if (page.readOnly) return html``;
  return html`<form method="post" action="${path}" data-confirm="${confirm ?? ''}">
<input type="hidden" name="_csrf" value="${page.csrf}">
<button type="submit" class="${danger ? 'danger' : primary ? 'primary' : ''}">${label}</button>
</form>`;
}
