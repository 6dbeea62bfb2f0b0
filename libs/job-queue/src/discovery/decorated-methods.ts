import type { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';

export interface DecoratedMethod<Meta> {
  wrapper: InstanceWrapper;
  prototype: object;
  methodName: string;
  method: (...args: unknown[]) => unknown;
  meta: Meta;
  /** `Class.method`, for messages. */
  location: string;
}

/**
 * The instance a decorated method is called on: only a singleton provider has one that lasts
 * (a request- or transient-scoped one is made per request, or per consumer); otherwise
 * `refuse` says why, with the method's location.
 */
export function singletonInstance<Meta>({ wrapper }: DecoratedMethod<Meta>, refuse: () => Error): object {
  if (!wrapper.isDependencyTreeStatic() || !wrapper.instance) throw refuse();
  return wrapper.instance as object;
}

/**
 * Every method carrying the metadata `key`, on every provider's and controller's class, as
 * Nest's own explorers (@nestjs/schedule, @nestjs/bullmq) find theirs.
 */
export function* decoratedMethods<Meta>(discovery: DiscoveryService, scanner: MetadataScanner, reflector: Reflector, key: string): Generator<DecoratedMethod<Meta>> {
  for (const wrapper of [...discovery.getProviders(), ...discovery.getControllers()]) {
    const { instance, metatype } = wrapper;
    const prototype = (instance && Object.getPrototypeOf(instance)) ?? (metatype as { prototype?: object } | undefined)?.prototype;
    if (!prototype || typeof prototype !== 'object') continue;
    for (const methodName of scanner.getAllMethodNames(prototype)) {
      const method = (prototype as Record<string, unknown>)[methodName];
      if (typeof method !== 'function') continue;
      const meta = reflector.get<Meta>(key, method as (...args: unknown[]) => unknown);
      if (meta === undefined) continue;
      const location = `${(metatype as { name?: string } | undefined)?.name ?? prototype.constructor.name}.${methodName}`;
      yield { wrapper, prototype, methodName, method: method as (...args: unknown[]) => unknown, meta, location };
    }
  }
}
