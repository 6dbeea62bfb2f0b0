import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';

/**
 * The sample's trivial guard for the dashboard: requests from this machine only. A real app
 * puts its own authentication here (a session, an admin role, a reverse proxy's header).
 */
@Injectable()
export class LocalOnlyGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ socket?: { remoteAddress?: string } }>();
    const address = request.socket?.remoteAddress ?? '';
    return address === '127.0.0.1' || address === '::1' || address === '::ffff:127.0.0.1';
  }
}
