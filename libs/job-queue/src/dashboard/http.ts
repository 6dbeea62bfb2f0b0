/**
 * What the dashboard reads of a request: fields that Express's and Fastify's requests both
 * have, so that it imports neither platform.
 */
export interface HttpRequest {
  method: string;
  url: string;
  originalUrl?: string;
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
  /**
   * 'https' or 'http', as the platform tells it: Express and Fastify take it from a TLS socket,
   * or from X-Forwarded-Proto when the app trusts the proxy that sent it (Express's `trust
   * proxy`, Fastify's `trustProxy`), and ignore that header otherwise.
   */
  protocol?: string;
  /**
   * host[:port] as the platform tells it (Express 5, Fastify 5): X-Forwarded-Host when the app
   * trusts the proxy that sent it, else the Host header.
   */
  host?: string;
  socket?: { encrypted?: boolean };
}

/** A request header's (first) value. */
export function header(request: HttpRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** Whether the browser reached the app over HTTPS, directly or through a proxy the app trusts. */
export function isHttps(request: HttpRequest): boolean {
  return typeof request.protocol === 'string' ? request.protocol === 'https' : request.socket?.encrypted === true;
}

/** The host (and port) the browser asked for, as far as the app believes its proxies. */
export function ownHost(request: HttpRequest): string | undefined {
  return typeof request.host === 'string' && request.host !== '' ? request.host : header(request, 'host');
}

/**
 * Nothing but the app's own origin: no CDN, no frames, no form posts elsewhere. Inline style
 * attributes are allowed (bar widths); inline scripts are not.
 */
export const HTML_HEADERS: Record<string, string> = {
  'Content-Type': 'text/html; charset=utf-8',
  'Content-Security-Policy': "default-src 'none'; style-src 'self' 'unsafe-inline'; script-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'self'; frame-ancestors 'none'",
  'Cache-Control': 'no-store',
  'Referrer-Policy': 'same-origin',
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
};

/** Sets headers on an Express response or a Fastify reply; an array is one header line per value (Set-Cookie). */
export function setHeaders(response: unknown, headers: Record<string, string | string[]>): void {
  const target = response as { setHeader?: (name: string, value: string | string[]) => void; header?: (name: string, value: string | string[]) => void };
  for (const [name, value] of Object.entries(headers)) {
    if (typeof target.setHeader === 'function') target.setHeader(name, value);
    else target.header?.(name, value);
  }
}

/**
 * The dashboard's root path, from the request's own path less the route's last `depth`
 * segments: so links hold whatever global prefix, path and versioning the app mounted it under.
 */
export function baseOf(request: HttpRequest, depth: number): string {
  // the path alone: a request-target in absolute form (`POST http://evil.example/queue/...`,
  // which Node and Express accept) must not put another host into Location or <base>
  const path = new URL(request.originalUrl ?? request.url, 'http://localhost').pathname.replace(/\/+$/, '');
  const segments = path.split('/');
  return segments.slice(0, segments.length - depth).join('/');
}
