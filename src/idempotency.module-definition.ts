import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { IdempotencyModuleOptions } from './interfaces/idempotency-options.interface.js';

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
  .build();
