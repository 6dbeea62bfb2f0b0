import { Injectable, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { EntityManager } from 'typeorm';
import { peerProviderInApp } from './optional-peer';

interface TransactionHostLike {
  isTransactionActive(): boolean;
  readonly tx: unknown;
}

/**
 * The transaction the caller is in, when the app uses `@nestjs-cls/transactional` (an
 * optional peer) with its TypeORM adapter: `add()` inside a `@Transactional()` method joins
 * that transaction without a `manager`. Asked through the plugin's own TransactionHost, never
 * by reading CLS keys. Without the package, or without the plugin set up, nothing changes.
 */
@Injectable()
export class AmbientTransaction implements OnModuleInit {
  private host?: TransactionHostLike;

  constructor(private readonly moduleRef: ModuleRef) {}

  onModuleInit(): void {
    // Loaded only by an app that imports it, and even then perhaps without ClsPluginTransactional: then nothing changes
    this.host = peerProviderInApp<TransactionHostLike>(this.moduleRef, '@nestjs-cls/transactional', 'TransactionHost');
  }

  /** The active transaction's EntityManager, or undefined outside one. */
  manager(): EntityManager | undefined {
    try {
      return this.host?.isTransactionActive() ? (this.host.tx as EntityManager) : undefined;
    } catch {
      return undefined; // no CLS context here (a call from outside a request, say)
    }
  }
}
