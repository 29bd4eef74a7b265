import { Body, Controller, Inject, Post } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import {
  PaymentsWriter,
  type AdapterFixture,
} from '../adapters/adapter-fixture.js';
import { startAdapterApp } from '../adapters/adapter-app.js';
import {
  Charging,
  chargingProviders,
  type PaymentRequest,
} from './charging.js';
import type { PaymentResponse } from './fault-matrix.module.js';
import type { MatrixSubject } from './postgres-matrix.js';

/**
 * The fault matrix's payments handler (fault-matrix.module.ts's, there on
 * TypeORM's repositories) on any data library: it writes through the
 * library's handle of the handler's transaction (`PaymentsWriter`), on the
 * adapters' tables (adapter-app.ts), the reference in `key`.
 */
@Controller('payments')
class AdapterPaymentsController {
  constructor(
    @Inject(PaymentsWriter) private readonly writer: PaymentsWriter,
    private readonly charging: Charging,
  ) {}

  /** The charge in a recovery point, then the payment and its two entries. */
  @Post()
  @Idempotent()
  async create(@Body() body: PaymentRequest): Promise<PaymentResponse> {
    const { reference, amount } = body;
    const charge = await this.charging.charge(body);
    const paymentId = await this.writer.insertPayment(
      reference,
      amount,
      charge.id,
    );
    this.charging.failIfTold(reference);
    await this.writer.insertLedger(paymentId, -amount, 'customer');
    await this.writer.insertLedger(paymentId, amount, 'merchant');
    return { paymentId, chargeId: charge.id, amount };
  }

  /** A payment unless over the limit: then a stored 402, its write rolled back. */
  @Post('limited')
  @Idempotent({ storeErrors: true })
  createLimited(@Body() body: PaymentRequest): Promise<{ paymentId: number }> {
    return this.charging.limited(body, (reference, amount) =>
      this.writer.insertPayment(reference, amount),
    );
  }
}

/** The fault matrix's application on `fixture`'s data library and adapter. */
export function adapterMatrixSubject(fixture: AdapterFixture): MatrixSubject {
  return {
    reference: 'key',
    async start(platform, leaseMs, gatewayUrl) {
      const target = await startAdapterApp(fixture, {
        platform,
        idempotency: { gc: false, lease: `${leaseMs}ms` },
        controllers: [AdapterPaymentsController],
        providers: chargingProviders(gatewayUrl),
      });
      return { target, pool: fixture.poolOf(target.app) };
    },
  };
}
