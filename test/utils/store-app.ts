import type {
  INestApplication,
  ModuleMetadata,
  NestApplicationOptions,
} from '@nestjs/common';
import {
  FastifyAdapter,
  type NestFastifyApplication,
} from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import {
  IdempotencyModule,
  type IdempotencyModuleOptions,
  type IdempotencyStoreOption,
} from '../../src/index.js';
import type { Platform } from './test-app.js';

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
  const appOptions: NestApplicationOptions = {
    logger: process.env.TEST_LOGS ? ['error', 'warn', 'log', 'debug'] : false,
    forceCloseConnections: true,
  };
  const app: INestApplication =
    platform === 'fastify'
      ? moduleRef.createNestApplication<NestFastifyApplication>(
          new FastifyAdapter(),
          appOptions,
        )
      : moduleRef.createNestApplication(appOptions);
  try {
    await app.listen(0, '127.0.0.1');
  } catch (error) {
    await app.close();
    throw error;
  }
  return {
    app,
    platform,
    url: await app.getUrl(),
    close: () => app.close(),
  };
}
