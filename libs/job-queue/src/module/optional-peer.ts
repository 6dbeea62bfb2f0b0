import type { ModuleRef } from '@nestjs/core';

/**
 * Optional peers (`nestjs-cls`, `@nestjs-cls/transactional`, `@opentelemetry/api`) are loaded
 * at run time, never imported by the core: an app without them never loads them.
 */

/** The package `name`, or undefined when it is not installed; any other failure to load it is thrown. */
export function loadOptionalPeer<Exports>(name: string): Exports | undefined {
  try {
    return require(name) as Exports;
  } catch (error) {
    const { code, message } = error as { code?: string; message?: string };
    if (code === 'MODULE_NOT_FOUND' && message?.includes(`'${name}'`)) return undefined;
    throw error;
  }
}

/** The instance of `token` (an optional peer's provider class) in the app's modules, or undefined when the app did not set it up. */
export function findInApp<Instance>(moduleRef: ModuleRef, token: unknown): Instance | undefined {
  try {
    return moduleRef.get(token as never, { strict: false }) as Instance;
  } catch {
    return undefined;
  }
}
