/**
 * The dashboard's pages and forms as a browser uses them, for the tests that drive it over
 * plain HTTP (fetch): the form-token cookies a page sets, and a form's fields and target.
 */
import assert from 'node:assert/strict';

export const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

/** The text of a page as a browser shows it: its character references decoded (the dashboard writes only these). */
export function decoded(page: string): string {
  const entities: Record<string, string> = { lt: '<', gt: '>', quot: '"', '#39': "'", amp: '&' };
  return page.replace(/&(lt|gt|quot|#39|amp);/g, (_, name: string) => entities[name]);
}

/** The form-token cookies a response sets, each as `name=value`, for a Cookie header. */
export function tokenCookies(response: Response): string[] {
  return response.headers
    .getSetCookie()
    .filter((cookie) => cookie.startsWith('jq_dashboard_csrf'))
    .map((cookie) => cookie.split(';')[0]);
}

/**
 * The form of `page` (served at `pageUrl`) that posts to `action`: its fields, the form token
 * among them, and where it posts, its action resolved against the page's <base> as a browser does.
 */
export function formOf(page: string, pageUrl: string, action: string): { target: URL; fields: URLSearchParams } {
  const form = [...page.matchAll(/<form method="post" action="([^"]*)"[^>]*>([\s\S]*?)<\/form>/g)].find((f) => decoded(f[1]) === action);
  assert.ok(form, `${pageUrl} has a form posting to ${action}`);
  const fields = new URLSearchParams([...form[2].matchAll(/<input [^>]*name="([^"]*)" value="([^"]*)"/g)].map((f): [string, string] => [decoded(f[1]), decoded(f[2])]));
  const href = decoded(/<base href="([^"]*)">/.exec(page)?.[1] ?? '');
  return { target: new URL(action, new URL(href, pageUrl)), fields };
}

/** Cookies as a browser keeps them for one site and path: one value per name, a later Set-Cookie replacing an earlier one. */
export class CookieJar {
  private readonly cookies = new Map<string, string>();

  /** `initial`: a Cookie header's pairs, e.g. the guard's session cookie. */
  constructor(initial = '') {
    for (const pair of initial.split(';')) if (pair.includes('=')) this.set(pair);
  }

  /** Keeps what a response's Set-Cookie headers set, in their order. */
  store(response: Response): void {
    for (const cookie of response.headers.getSetCookie()) this.set(cookie.split(';')[0]);
  }

  /** The Cookie header the browser would send. */
  get header(): string {
    return [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
  }

  private set(pair: string): void {
    const at = pair.indexOf('=');
    this.cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
  }
}
