import { Body, Controller, Get, Headers, HttpCode, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { hash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { IdempotencyContext, Idempotent } from 'nestjs-idempotency';
import type { DataSource } from 'typeorm';
import { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import type { Payment } from '../../../sample-app/payments/payment.entity.js';
import {
  standInCharge,
  type Charge,
} from '../../../sample-app/payments/payment-gateway.js';
import { PaymentsService } from '../../../sample-app/payments/payments.service.js';
import { InFlight } from './in-flight.js';
import { PoolGauge, type PoolReading } from './pool-gauge.js';

/** How long the gateway of the gateway routes takes to answer (ms). */
const GATEWAY_MS = Number(process.env.BENCH_GATEWAY_MS ?? 50);
/** A held request gives up waiting for its release after this long (ms). */
const HOLD_LIMIT_MS = 60_000;

/**
 * Routes of `npm run bench`. Each idempotent route has a baseline that does
 * the same work the way an application without the idempotency module
 * would: the gateway first, outside any transaction, then one short
 * transaction for the writes. All of them write what the sample's
 * `POST /payments` writes, through `PaymentsService.book()`: one payment, two
 * ledger entries, read back.
 */
@Controller('bench')
export class BenchController {
  /** Held requests waiting for `POST /bench/release`. */
  private readonly held = new Set<() => void>();

  constructor(
    private readonly payments: PaymentsService,
    private readonly idempotency: IdempotencyContext,
    private readonly pool: PoolGauge,
    private readonly inFlight: InFlight,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  /** Baseline: the gateway stand-in (no wait), then the writes in a plain transaction. */
  @Post('baseline')
  async baseline(
    @Body() dto: CreatePaymentDto,
    @Headers('idempotency-key') key?: string,
  ): Promise<Payment> {
    const charge = await this.charge(dto, plainKey(key), 0);
    return this.book(dto, charge);
  }

  /** The same as an `@Idempotent()` handler: the module provides the transaction. */
  @Post('payments')
  @Idempotent()
  async create(@Body() dto: CreatePaymentDto): Promise<Payment> {
    const charge = await this.charge(dto, this.chargeKey(), 0);
    return this.payments.book(dto, charge.id);
  }

  /** Gateway baseline: waits for the gateway, then a short transaction. */
  @Post('gateway-baseline')
  async gatewayBaseline(
    @Body() dto: CreatePaymentDto,
    @Headers('idempotency-key') key?: string,
  ): Promise<Payment> {
    const charge = await this.charge(dto, plainKey(key), GATEWAY_MS);
    return this.book(dto, charge);
  }

  /** The same as an `@Idempotent()` handler. */
  @Post('gateway')
  @Idempotent()
  async gatewayPayment(@Body() dto: CreatePaymentDto): Promise<Payment> {
    const charge = await this.charge(dto, this.chargeKey(), GATEWAY_MS);
    return this.payments.book(dto, charge.id);
  }

  /**
   * An `@Idempotent()` handler that keeps its key in progress until
   * `POST /bench/release`, so that the bench can count what a refused
   * request (409) costs.
   */
  @Post('held')
  @Idempotent()
  async heldPayment(@Body() dto: CreatePaymentDto): Promise<Payment> {
    const released = new AbortController();
    const release = () => released.abort();
    this.held.add(release);
    try {
      await sleep(HOLD_LIMIT_MS, undefined, { signal: released.signal });
    } catch {
      // Released.
    } finally {
      this.held.delete(release);
    }
    const charge = await this.charge(dto, this.chargeKey(), 0);
    return this.payments.book(dto, charge.id);
  }

  /** How many held requests are waiting. */
  @Get('held')
  waiting(): { waiting: number } {
    return { waiting: this.held.size };
  }

  /** Lets every held request go on. */
  @Post('release')
  @HttpCode(200)
  release(): { released: number } {
    const released = this.held.size;
    for (const release of this.held) {
      release();
    }
    return { released };
  }

  /**
   * The most pooled connections held at once since the last call, and the
   * requests still being handled (this one excluded).
   */
  @Post('pool')
  @HttpCode(200)
  readPool(): PoolReading & { inFlight: number } {
    return { ...this.pool.read(), inFlight: this.inFlight.others };
  }

  /** The gateway stand-in, answering after `waitMs`. */
  protected async charge(
    _dto: CreatePaymentDto,
    key: string,
    waitMs: number,
  ): Promise<Charge> {
    if (waitMs > 0) {
      await sleep(waitMs);
    }
    return standInCharge(key);
  }

  protected chargeKey(): string {
    return this.idempotency.deriveKey('charge');
  }

  /** What a user without the module writes: one short transaction. */
  protected book(dto: CreatePaymentDto, charge: Charge): Promise<Payment> {
    return this.dataSource.transaction((manager) =>
      this.payments.book(dto, charge.id, manager),
    );
  }
}

/**
 * The gateway key of a request handled without the module: the header, when
 * sent (else a new UUID), names the charge, derived as the module derives
 * `deriveKey('charge')`: a UUID of version 8 made of the SHA-256 of the key
 * and the call's name, so that a baseline hashes as much per charge as the
 * module does.
 */
export function plainKey(key: string | undefined): string {
  const digest = hash(
    'sha256',
    JSON.stringify([key ?? randomUUID(), 'charge']),
    'buffer',
  );
  digest[6] = (digest[6] & 0x0f) | 0x80;
  digest[8] = (digest[8] & 0x3f) | 0x80;
  const hex = digest.toString('hex', 0, 16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
