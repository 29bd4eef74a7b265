import type { INestApplication, ModuleMetadata } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  IdempotencyModule,
  type IdempotencyModuleOptions,
} from '../../src/index.js';
import type { IdempotencyStoreOption } from '../../src/stores/index.js';
import { listenOn, type Platform } from './test-app.js';

/** A running application on a store other than PostgreSQL. */
export interface StoreApp {
  readonly app: INestApplication;
  readonly platform: Platform;
  /** Base URL of the listening server. */
  readonly url: string;
  close(): Promise<void>;
}

/** Options of {@link startStoreApp}. */
export interface StoreAppOptions extends ModuleMetadata {
  /** The `store` of `IdempotencyModule.forRoot()`. */
  readonly store: IdempotencyStoreOption;
  /** The module's other options (`gc: false` unless given). */
  readonly idempotency?: IdempotencyModuleOptions;
  /** Express unless told. */
  readonly platform?: Platform;
}

/**
 * Boots a Nest application whose idempotency module runs on `store`, with
 * no TypeORM module at all, listening on a random loopback port.
 */
export async function startStoreApp(
  options: StoreAppOptions,
): Promise<StoreApp> {
  const {
    store,
    idempotency = {},
    platform = 'express',
    imports = [],
    ...metadata
  } = options;
  const moduleRef = await Test.createTestingModule({
    ...metadata,
    imports: [
      IdempotencyModule.forRoot({ gc: false, ...idempotency, store }),
      ...imports,
    ],
  }).compile();
  const app = await listenOn(moduleRef, platform);
  return {
    app,
    platform,
    url: await app.getUrl(),
    close: () => app.close(),
  };
}
