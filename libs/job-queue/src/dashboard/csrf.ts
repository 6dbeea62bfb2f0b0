import { BadRequestException, ForbiddenException } from '@nestjs/common';
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
 * The request's token cookies: the tokens, in order, and the names whose value is no token
 * (not valid percent-encoding, which a sibling site can set for the whole domain; the wrong
 * length; not lowercase hex). Such a cookie is ignored, never an error on every page; a name
 * that also carries a valid token (two cookies of one name, from two paths or domains) is not
 * counted as malformed, so that clearing it never drops the good one.
 */
function tokenCookies(request: HttpRequest): { tokens: string[]; malformed: string[] } {
  const tokens: string[] = [];
  const bad = new Set<string>();
  const good = new Set<string>();
  for (const part of (header(request, 'cookie') ?? '').split(';')) {
    const at = part.indexOf('=');
    const name = part.slice(0, at).trim();
    if (at <= 0 || !TOKEN_COOKIE.test(name)) continue;
    let value: string | undefined;
    try {
      value = decodeURIComponent(part.slice(at + 1).trim());
    } catch {
      // URIError: not a token
    }
    if (value !== undefined && TOKEN.test(value)) {
      tokens.push(value);
      good.add(name);
    } else bad.add(name);
  }
  return { tokens, malformed: [...bad].filter((name) => !good.has(name)) };
}

/**
 * The request's token, or a new one, and the Set-Cookie headers to send: the new token's
 * cookie (for the paths under `base`; Secure when the page came over HTTPS, so that it never
 * travels in clear), after one that expires each malformed token cookie the request carried,
 * so that a browser holding a broken cookie gets a page, and a working form, rather than a
 * refusal at every action. (A cookie set for another path or domain, a sibling site's, is not
 * cleared by this: it stays ignored.)
 */
export function csrfToken(request: HttpRequest, base: string): { token: string; setCookie: string[] } {
  const { tokens: [existing], malformed } = tokenCookies(request);
  const attributes = `Path=${base || '/'}; HttpOnly; SameSite=Strict${isHttps(request) ? '; Secure' : ''}`;
  const setCookie = malformed.map((name) => `${name}=; ${attributes}; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT`);
  if (existing) return { token: existing, setCookie };
  const token = randomBytes(16).toString('hex');
  const name = `${CSRF_COOKIE}_${token.slice(0, 8)}`;
  return { token, setCookie: [...setCookie, `${name}=${token}; ${attributes}`] };
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
 * else Host. A same-origin POST whose form token matches no valid token cookie while a token
 * cookie is malformed is a bad request (400), not a forgery: reloading the page clears the
 * cookie (csrfToken). One that matches a valid cookie goes through whatever else is sent.
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
  const { tokens, malformed } = tokenCookies(request);
  // a token's form first: timingSafeEqual throws on buffers of different lengths (a field of
  // 32 characters that are not all ASCII), which was a 500
  const matches = (stored: string) => typeof sent === 'string' && TOKEN.test(sent) && timingSafeEqual(Buffer.from(stored), Buffer.from(sent));
  if (tokens.some(matches)) return;
  if (malformed.length > 0) {
    throw new BadRequestException(`malformed form token cookie (${malformed.join(', ')}): reload the page, which replaces it`);
  }
  throw new ForbiddenException('missing or wrong form token: reload the page');
}
