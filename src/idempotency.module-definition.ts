import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { IdempotencyModuleOptions } from './interfaces/idempotency-options.interface.js';
import type { IdempotencyStoreExtras } from './interfaces/idempotency-store-option.interface.js';
import { withStore } from './stores/store.providers.js';

/** @internal */
export const {
  ConfigurableModuleClass,
  MODULE_OPTIONS_TOKEN: IDEMPOTENCY_MODULE_OPTIONS,
  OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<IdempotencyModuleOptions>({
  moduleName: 'Idempotency',
})
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createIdempotencyOptions')
  .setExtras<IdempotencyStoreExtras>(
    { store: undefined },
    (definition, extras) => withStore(definition, extras.store),
  )
  .build();
