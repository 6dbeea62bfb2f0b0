import { ForbiddenException } from '@nestjs/common';
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { header, isHttps, ownHost, type HttpRequest } from './http';

/**
 * Cross-site request protection for the dashboard's actions (POST forms), double-submit
 * style: a random token in a SameSite=Strict cookie, repeated in a hidden field of every
 * form (a form's token must be the value of one of the request's token cookies). A page on another site can make the browser send the cookie on a POST (not with
 * Strict), but cannot read it to fill in the field. Any replica checks it without a secret
 * of its own, so it works behind a load balancer. Requests marked cross-site by the browser
 * (Sec-Fetch-Site) or from another origin are refused before that (checkCsrf).
 */
export const CSRF_COOKIE = 'jq_dashboard_csrf';
export const CSRF_FIELD = '_csrf';
const TOKEN = /^[0-9a-f]{32}$/;

/**
 * A token cookie's name: `jq_dashboard_csrf_` and the first 8 hex digits of its token, so that
 * two pages opened at once, which each got a new token, set two cookies rather than the later
 * overwriting the earlier (whose form would then be refused); or `jq_dashboard_csrf` alone, as
 * versions before this one named it.
 */
const TOKEN_COOKIE = /^jq_dashboard_csrf(_[0-9a-f]{8})?$/;

/**
 * The request's form tokens, from its token cookies in order. A value that is not valid
 * percent-encoding (which a sibling site can set for the whole domain) or not a token is
 * none, rather than an error on every page.
 */
function tokens(request: HttpRequest): string[] {
  const found: string[] = [];
  for (const part of (header(request, 'cookie') ?? '').split(';')) {
    const at = part.indexOf('=');
    if (at <= 0 || !TOKEN_COOKIE.test(part.slice(0, at).trim())) continue;
    try {
      const value = decodeURIComponent(part.slice(at + 1).trim());
      if (TOKEN.test(value)) found.push(value);
    } catch {
      // URIError: not a token
    }
  }
  return found;
}

/**
 * The request's token, or a new one with the Set-Cookie header that stores it (for the paths
 * under `base`; Secure when the page came over HTTPS, so that it never travels in clear).
 */
export function csrfToken(request: HttpRequest, base: string): { token: string; setCookie?: string } {
  const [existing] = tokens(request);
  if (existing) return { token: existing };
  const token = randomBytes(16).toString('hex');
  const name = `${CSRF_COOKIE}_${token.slice(0, 8)}`;
  return { token, setCookie: `${name}=${token}; Path=${base || '/'}; HttpOnly; SameSite=Strict${isHttps(request) ? '; Secure' : ''}` };
}

/** The host[:port] of an Origin header, or undefined when it is no URL. */
function hostOf(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined;
  }
}

/**
 * Throws 403 unless the POST comes from the dashboard's own page. A browser that sends
 * Sec-Fetch-Site says where the request comes from, and no page can forge it: that decides,
 * so a proxy that rewrites Host needs no configuration. Without it (older browsers), Origin
 * must name the host the browser asked for: X-Forwarded-Host from a proxy the app trusts,
 * else Host.
 */
export function checkCsrf(request: HttpRequest): void {
  const site = header(request, 'sec-fetch-site');
  if (site !== undefined) {
    if (site !== 'same-origin' && site !== 'none') throw new ForbiddenException('cross-site request refused');
  } else {
    const origin = header(request, 'origin');
    if (origin !== undefined && origin !== 'null' && hostOf(origin) !== ownHost(request)) throw new ForbiddenException('request from another origin refused');
  }
  const sent = (request.body as Record<string, unknown> | undefined)?.[CSRF_FIELD];
  // a token's form first: timingSafeEqual throws on buffers of different lengths (a field of
  // 32 characters that are not all ASCII), which was a 500
  if (typeof sent !== 'string' || !TOKEN.test(sent)) throw new ForbiddenException('missing or wrong form token: reload the page');
  const matches = (stored: string) => timingSafeEqual(Buffer.from(stored), Buffer.from(sent));
  if (!tokens(request).some(matches)) throw new ForbiddenException('missing or wrong form token: reload the page');
}
