import type { ModuleRef } from '@nestjs/core';

/**
 * Optional peers (`nestjs-cls`, `@nestjs-cls/transactional`, `@opentelemetry/api`) are loaded
 * at run time, never imported by the core: an app without them never loads them (and one
 * that does not import the CLS ones never has them loaded by us: see loadedPeer).
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

/**
 * The package `name` if this process has loaded it already (the app imported it), else
 * undefined, installed or not. For peers whose provider only an app that imports them can
 * have set up (ClsModule, ClsPluginTransactional): loading nestjs-cls enters an
 * AsyncLocalStorage at once, after which every promise of the process pays async hooks
 * (a tenth of a drain's CPU), which an app that has the package installed but does not use it
 * must not pay.
 */
export function loadedPeer<Exports>(name: string): Exports | undefined {
  let path: string;
  try {
    path = require.resolve(name);
  } catch (error) {
    const { code, message } = error as { code?: string; message?: string };
    if (code === 'MODULE_NOT_FOUND' && message?.includes(`'${name}'`)) return undefined;
    throw error;
  }
  // An ESM app's import of these CommonJS packages lands in require.cache too.
  return require.cache[path]?.exports as Exports | undefined;
}

/** The instance of `token` (an optional peer's provider class) in the app's modules, or undefined when the app did not set it up. */
export function findInApp<Instance>(moduleRef: ModuleRef, token: unknown): Instance | undefined {
  try {
    return moduleRef.get(token as never, { strict: false }) as Instance;
  } catch {
    return undefined;
  }
}
