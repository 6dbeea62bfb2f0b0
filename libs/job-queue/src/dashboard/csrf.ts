import { ForbiddenException } from '@nestjs/common';
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { header, isHttps, ownHost, type HttpRequest } from './http';

/**
 * Cross-site request protection for the dashboard's actions (POST forms), double-submit
 * style: a random token in a SameSite=Strict cookie, repeated in a hidden field of every
 * form. A page on another site can make the browser send the cookie on a POST (not with
 * Strict), but cannot read it to fill in the field. Any replica checks it without a secret
 * of its own, so it works behind a load balancer. Requests marked cross-site by the browser
 * (Sec-Fetch-Site) or from another origin are refused before that (checkCsrf).
 */
export const CSRF_COOKIE = 'jq_dashboard_csrf';
export const CSRF_FIELD = '_csrf';
const TOKEN = /^[0-9a-f]{32}$/;

/**
 * The first value of the cookie `name` that is valid percent-encoding: one that is not (which
 * a sibling site can set for the whole domain) is no token, rather than an error on every page.
 */
function cookie(request: HttpRequest, name: string): string | undefined {
  for (const part of (header(request, 'cookie') ?? '').split(';')) {
    const at = part.indexOf('=');
    if (at <= 0 || part.slice(0, at).trim() !== name) continue;
    try {
      return decodeURIComponent(part.slice(at + 1).trim());
    } catch {
      // URIError: not this one
    }
  }
  return undefined;
}

/**
 * The request's token, or a new one with the Set-Cookie header that stores it (for the paths
 * under `base`; Secure when the page came over HTTPS, so that it never travels in clear).
 */
export function csrfToken(request: HttpRequest, base: string): { token: string; setCookie?: string } {
  const existing = cookie(request, CSRF_COOKIE);
  if (existing && TOKEN.test(existing)) return { token: existing };
  const token = randomBytes(16).toString('hex');
  return { token, setCookie: `${CSRF_COOKIE}=${token}; Path=${base || '/'}; HttpOnly; SameSite=Strict${isHttps(request) ? '; Secure' : ''}` };
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
  const stored = cookie(request, CSRF_COOKIE);
  const sent = (request.body as Record<string, unknown> | undefined)?.[CSRF_FIELD];
  if (!stored || typeof sent !== 'string' || !TOKEN.test(stored) || sent.length !== stored.length) {
    throw new ForbiddenException('missing or wrong form token: reload the page');
  }
  if (!timingSafeEqual(Buffer.from(stored), Buffer.from(sent))) throw new ForbiddenException('missing or wrong form token: reload the page');
}
