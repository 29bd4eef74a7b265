import {
  Body,
  Controller,
  Headers,
  Post,
  type DynamicModule,
  type Type,
} from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import type { DataSource } from 'typeorm';
import { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import type { Payment } from '../../../sample-app/payments/payment.entity.js';
import { standInCharge } from '../../../sample-app/payments/payment-gateway.js';
import { PaymentsService } from '../../../sample-app/payments/payments.service.js';
import { plainKey } from './bench.controller.js';
import { noopAnswer, type NoopAnswer } from './stores.controller.js';

/** What the bench uses of `@node-idempotency/nestjs` (it ships CommonJS). */
export interface NodeIdempotencyPackage {
  readonly NodeIdempotencyModule: {
    forRootAsync(options: {
      storage: { adapter: 'redis'; options: { url: string } };
      cacheKeyPrefix: string;
    }): DynamicModule;
  };
  Idempotent(options?: object): MethodDecorator;
}

/** The other library's module and a controller under its interceptor. */
export interface NodeIdempotencyParts {
  readonly module: DynamicModule;
  readonly controller: Type;
}

/**
 * `@node-idempotency/nestjs` as a bench installed it in `dir` (its peers are
 * NestJS 9 and 10, so it is no dependency of this repository). Its
 * `require('@nestjs/common')` finds this repository's NestJS through
 * `NODE_PATH`, which the benches set: one application, one NestJS, the
 * library the only difference.
 */
export function requireNodeIdempotency(dir: string): NodeIdempotencyPackage {
  const require = createRequire(join(dir, 'bench.cjs'));
  return require('@node-idempotency/nestjs') as NodeIdempotencyPackage;
}

/** Its module on its Redis storage adapter: records under `prefix` on `redisUrl`. */
export function nodeIdempotencyModule(
  library: NodeIdempotencyPackage,
  redisUrl: string,
  prefix: string,
): DynamicModule {
  return library.NodeIdempotencyModule.forRootAsync({
    storage: { adapter: 'redis', options: { url: redisUrl } },
    cacheKeyPrefix: prefix,
  });
}

/**
 * `@node-idempotency/nestjs` as the stores bench installed it in `dir`
 * ({@link requireNodeIdempotency}): its module on its Redis storage adapter
 * (records under `prefix` on `redisUrl`), and `POST /theirs/payments`, the
 * bench's baseline handler (the gateway, then the payment in a short
 * transaction) under its `@Idempotent()`, and `POST /theirs/noop`, the no-op
 * route likewise.
 */
export function nodeIdempotency(
  dir: string,
  redisUrl: string,
  prefix: string,
): NodeIdempotencyParts {
  const library = requireNodeIdempotency(dir);

  @Controller('theirs')
  class NodeIdempotencyBenchController {
    constructor(
      private readonly payments: PaymentsService,
      @InjectDataSource() private readonly dataSource: DataSource,
    ) {}

    @Post('payments')
    @library.Idempotent()
    async create(
      @Body() dto: CreatePaymentDto,
      @Headers('idempotency-key') key?: string,
    ): Promise<Payment> {
      const charge = standInCharge(plainKey(key));
      return this.dataSource.transaction((manager) =>
        this.payments.book(dto, charge.id, manager),
      );
    }

    /** The bench's no-op route (answers at once) under its `@Idempotent()`. */
    @Post('noop')
    @library.Idempotent()
    noop(@Body() dto: CreatePaymentDto): NoopAnswer {
      return noopAnswer(dto);
    }
  }

  return {
    module: nodeIdempotencyModule(library, redisUrl, prefix),
    controller: NodeIdempotencyBenchController,
  };
}
