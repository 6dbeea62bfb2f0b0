import type { ModuleRef } from '@nestjs/core';

/**
 * Optional peers (`nestjs-cls`, `@nestjs-cls/transactional`, `@opentelemetry/api`) are loaded
 * at run time, never imported by the core: an app without them never loads them (and one
 * that does not import the CLS ones never has them loaded by us: see loadedPeer).
 */

/** The package `name`, or undefined when it is not installed; any other failure to load it is thrown. */
export function loadOptionalPeer<Exports>(name: string): Exports | undefined {
  return unlessMissing(name, () => require(name) as Exports);
}

/**
 * The package `name` if this process has loaded it already (the app imported it), else
 * undefined, installed or not. For peers whose provider only an app that imports them can
 * have set up (ClsModule, ClsPluginTransactional): loading nestjs-cls enters an
 * AsyncLocalStorage at once, after which every promise of the process pays async hooks
 * (a tenth of a drain's CPU), which an app that has the package installed but does not use it
 * must not pay.
 */
function loadedPeer<Exports>(name: string): Exports | undefined {
  const path = unlessMissing(name, () => require.resolve(name));
  // An ESM app's import of these CommonJS packages lands in require.cache too.
  return path === undefined ? undefined : (require.cache[path]?.exports as Exports | undefined);
}

/**
 * The app's instance of the provider class `exported` of the peer `name` (ClsService,
 * TransactionHost), or undefined when the app has not loaded the package or not set the
 * provider up.
 */
export function peerProviderInApp<Instance>(moduleRef: ModuleRef, name: string, exported: string): Instance | undefined {
  const token = loadedPeer<Record<string, unknown>>(name)?.[exported];
  if (token === undefined) return undefined;
  try {
    return moduleRef.get(token as never, { strict: false }) as Instance;
  } catch {
    return undefined;
  }
}

/** What `load` returns, or undefined when it failed because the package `name` is not installed. */
function unlessMissing<T>(name: string, load: () => T): T | undefined {
  try {
    return load();
  } catch (error) {
    const { code, message } = error as { code?: string; message?: string };
    if (code === 'MODULE_NOT_FOUND' && message?.includes(`'${name}'`)) return undefined;
    throw error;
  }
}
