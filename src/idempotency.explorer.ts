import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import {
  RESPONSE_PASSTHROUGH_METADATA,
  ROUTE_ARGS_METADATA,
} from '@nestjs/common/constants.js';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { IDEMPOTENT_METADATA } from './idempotency.constants.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from './idempotency.tokens.js';
import {
  resolveRouteOptions,
  type ResolvedIdempotencyOptions,
} from './idempotency.options.js';
import type { IdempotentOptions } from './interfaces/idempotency-options.interface.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';

/** Parameters through which a handler could send its response itself. */
const SELF_SENDING = new Set<number>([
  RouteParamtypes.RESPONSE,
  RouteParamtypes.NEXT,
]);

/**
 * @internal Checks every decorated controller method at bootstrap: its options
 * must be valid, and it must not send its response itself (`@Res()` or
 * `@Next()` without `passthrough`), since such a response cannot be stored.
 */
@Injectable()
export class IdempotencyExplorer implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  onModuleInit(): void {
    for (const wrapper of this.discovery.getControllers()) {
      const controller = wrapper.metatype as
        (new (...args: never[]) => unknown) | null;
      if (!controller?.prototype) {
        continue;
      }
      for (const method of this.scanner.getAllMethodNames(
        controller.prototype,
      )) {
        const handler = (controller.prototype as Record<string, () => unknown>)[
          method
        ];
        const options = this.reflector.getAllAndOverride<
          IdempotentOptions | undefined
        >(IDEMPOTENT_METADATA, [handler, controller]);
        if (options) {
          this.check(controller, method, options);
        }
      }
    }
  }

  private check(
    controller: new (...args: never[]) => unknown,
    method: string,
    options: IdempotentOptions,
  ) {
    const where = `${controller.name}.${method}`;
    try {
      resolveRouteOptions(this.options, options);
    } catch (error) {
      (error as Error).message =
        `@Idempotent() on ${where}: ${(error as Error).message}`;
      throw error;
    }
    const args = (Reflect.getMetadata(
      ROUTE_ARGS_METADATA,
      controller,
      method,
    ) ?? {}) as Record<string, unknown>;
    const sendsItself = Object.keys(args).some((name) =>
      SELF_SENDING.has(Number(name.split(':')[0])),
    );
    const passthrough =
      Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, controller, method) ===
      true;
    if (sendsItself && !passthrough) {
      throw new IdempotencyConfigurationError(
        `@Idempotent() on ${where}: the handler sends its response itself (@Res() or @Next()), so its response cannot be stored and replayed.`,
        'Return the body from the handler and let Nest send it.',
        'Or use @Res({ passthrough: true }) to set headers or cookies while Nest sends the body.',
      );
    }
  }
}
