import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';

/** The dashboard tests' guard: operators carry the cookie `operator=yes`. */
@Injectable()
export class OperatorGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const { headers } = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>();
    return /(^|;\s*)operator=yes(;|$)/.test(headers.cookie ?? '');
  }
}
