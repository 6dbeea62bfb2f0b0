import { Injectable, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { peerProviderInApp } from './optional-peer';

interface ClsServiceLike {
  run<T>(options: { ifNested: 'inherit' | 'reuse' | 'override' }, callback: () => T): T;
}

/**
 * When the app uses `nestjs-cls` (an optional peer), each job runs in a CLS context of its
 * own, as a request does: `ClsService` works inside handlers, and so does `@Transactional()`
 * of @nestjs-cls/transactional. Without the package (or without ClsModule), handlers run as
 * they are.
 */
@Injectable()
export class JobClsContext implements OnModuleInit {
  private cls?: ClsServiceLike;

  constructor(private readonly moduleRef: ModuleRef) {}

  onModuleInit(): void {
    // Loaded only by an app that imports it, and even then perhaps without ClsModule: then handlers run as they are
    this.cls = peerProviderInApp<ClsServiceLike>(this.moduleRef, 'nestjs-cls', 'ClsService');
  }

  /** Runs `fn` in a fresh CLS context (never the caller's: each job has its own). */
  run<T>(fn: () => T): T {
    return this.cls ? this.cls.run({ ifNested: 'override' }, fn) : fn();
  }
}
