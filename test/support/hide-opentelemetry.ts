/**
 * Imported first by a test file: from then on `@opentelemetry/api` cannot be found in this
 * process, as in an app that does not install it (the package is an optional peer).
 */
import Module from 'node:module';

const modules = Module as unknown as { _resolveFilename: (request: string, ...rest: unknown[]) => string };
const resolve = modules._resolveFilename;
modules._resolveFilename = function (this: unknown, request: string, ...rest: unknown[]) {
  if (request === '@opentelemetry/api') throw Object.assign(new Error(`Cannot find module '${request}'`), { code: 'MODULE_NOT_FOUND' });
  return resolve.call(this, request, ...rest);
};
