import { SetMetadata } from '@nestjs/common';
import { IDEMPOTENT_METADATA } from './idempotency.constants.js';
import type { IdempotentOptions } from './interfaces/idempotency-options.interface.js';

/**
 * Makes a controller method (or every method of a controller) idempotent.
 *
 * The handler runs in one database transaction shared with the application's
 * repositories; its writes and the idempotency record commit together. A
 * duplicate request with the same `Idempotency-Key` gets the stored response
 * replayed and never runs the handler again.
 *
 * @param options overrides of the module-wide options for this route.
 *
 * @example
 * @Post()
 * @Idempotent({ ttl: '7d' })
 * create(@Body() dto: CreatePaymentDto) {
 *   return this.payments.create(dto);
 * }
 */
export const Idempotent = (options: IdempotentOptions = {}) =>
  SetMetadata(IDEMPOTENT_METADATA, options);
