import { isJobQueueError } from '../core/errors';
import { csrfToken } from './csrf';
import { errorCode, flashOf, type DoneCode, type ErrorCode } from './flash';
import { query } from './html';
import { baseOf, HTML_HEADERS, setHeaders, type HttpRequest } from './http';
import type { PageContext } from './views/layout';

/**
 * What every page's route and every action's route do, whichever controller holds them: a
 * page gets its PageContext (and the response its headers), an action runs and redirects.
 */

/** What an action did: a code of flash.ts (`done` or `error`), its number, and the page to show it on if not the route's own. */
export interface ActionOutcome {
  done?: DoneCode;
  n?: string;
  error?: ErrorCode;
  to?: string;
}

/**
 * What every page needs: its base path (the route is `depth` segments below the dashboard's
 * root), a form token (set as a cookie if new; a malformed token cookie is expired), the
 * flash message of `?done=`/`?error=`; and the page's headers, set on the response.
 */
export function pageContext(request: HttpRequest, response: unknown, depth: number, params: Record<string, unknown>, readOnly: boolean): PageContext {
  const base = baseOf(request, depth);
  const { token, setCookie } = csrfToken(request, base);
  setHeaders(response, { ...HTML_HEADERS, ...(setCookie.length > 0 ? { 'Set-Cookie': setCookie } : {}) });
  return { base, csrf: token, readOnly, flash: flashOf(params) };
}

/**
 * Runs an action and returns its 303 redirect (for `@Redirect()`) to `to` (relative to the
 * dashboard's root; '' the overview) with what happened, as codes: a JobQueueError shows on
 * that page, any other error is the app's.
 */
export async function runAction(request: HttpRequest, depth: number, to: string, run: () => Promise<ActionOutcome>): Promise<{ url: string; statusCode: number }> {
  const base = baseOf(request, depth);
  let outcome: ActionOutcome;
  try {
    outcome = await run();
  } catch (error) {
    if (!isJobQueueError(error)) throw error;
    outcome = { error: errorCode(error) };
  }
  const page = outcome.to ?? to;
  // the overview at the root's own path: Fastify has no route for it with a trailing slash
  return { url: `${page ? `${base}/${page}` : base || '/'}${query({ done: outcome.done, n: outcome.n, error: outcome.error })}`, statusCode: 303 };
}
