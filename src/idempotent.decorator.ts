import { SetMetadata } from '@nestjs/common';
import { IDEMPOTENT_METADATA } from './idempotency.constants.js';
import type { IdempotentOptions } from './interfaces/idempotency-options.interface.js';

/**
 * Makes a controller method (or every handler of a controller) idempotent.
 *
 * The handler runs in one database transaction shared with the application's
 * repositories; its writes and the idempotency record commit together. A
 * duplicate request with the same `Idempotency-Key` gets the stored response
 * replayed and never runs the handler again.
 *
 * It works on the HTTP route handlers (`@Get()`, `@Post()`, ...) and the
 * message handlers (`@MessagePattern()`, `@EventPattern()`) of controllers,
 * and on GraphQL mutations (`@Mutation()`). On a controller class it applies
 * to those handlers, not to its other methods; on a resolver class, to its
 * mutations. A handler inherited from a base class is a handler of each
 * class that inherits it, idempotent as that class's decorator (or the
 * method's own) says, and left alone in a class without one. Anywhere
 * else (a GraphQL query, subscription or field resolver, a WebSocket
 * gateway, a queue processor, a scheduled job, any other provider method)
 * it would do nothing, so the application refuses to start with an
 * `IdempotencyConfigurationError` naming the method: there, inject
 * `IdempotencyService` and wrap the work in `run({ scope, key }, fn)`.
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
