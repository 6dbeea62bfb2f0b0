import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { isIP } from 'node:net';

type Headers = Record<string, string | string[] | undefined>;

/**
 * The sample's trivial guard for the dashboard: requests from this machine only. A real app
 * puts its own authentication here (a session, an admin role, a reverse proxy's header).
 *
 * Behind a proxy on the same host every request comes from 127.0.0.1, whoever sent it: so the
 * clients a proxy names (X-Forwarded-For, X-Real-IP, Forwarded's for=) must be this machine
 * too, whatever proxies the app trusts. A proxy that names no client (a plain TCP forward)
 * cannot be told from a local client: serve the dashboard through one only with real
 * authentication here.
 */
@Injectable()
export class LocalOnlyGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ socket?: { remoteAddress?: string }; headers: Headers }>();
    return [request.socket?.remoteAddress, ...forwardedClients(request.headers)].every(isLoopback);
  }
}

/** Every client address the proxies in front of the app name, as they wrote it. */
function forwardedClients(headers: Headers): string[] {
  const values = (name: string) => [headers[name] ?? []].flat();
  return [
    ...values('x-forwarded-for').flatMap((value) => value.split(',')),
    ...values('x-real-ip'),
    // Forwarded: for=192.0.2.60;proto=https, for="[2001:db8::17]:4711", for=unknown
    ...values('forwarded').flatMap((value) => [...value.matchAll(/(?:^|[;,\s])for=("[^"]*"|[^;,\s]*)/gi)].map((match) => match[1])),
  ].map((address) => address.trim());
}

/** A loopback address (127.0.0.0/8, ::1, or either mapped), with a Forwarded header's quotes, brackets and port taken off. */
function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  let bare = address.replace(/^"|"$/g, '');
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(bare);
  if (bracketed) bare = bracketed[1];
  else if (/^[\d.]+:\d+$/.test(bare)) bare = bare.slice(0, bare.lastIndexOf(':'));
  bare = bare.replace(/^::ffff:/i, '');
  if (isIP(bare) === 4) return bare.startsWith('127.');
  return isIP(bare) === 6 && /^(0{0,4}:){7}0{0,3}1$|^::1$/.test(bare);
}
