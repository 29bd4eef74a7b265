import {
  BadRequestException,
  Body,
  Controller,
  Injectable,
  Module,
  Post,
  type DynamicModule,
} from '@nestjs/common';
import {
  ClsPluginTransactional,
  Propagation,
  Transactional,
  TransactionHost,
} from '@nestjs-cls/transactional';
import { ClsModule } from 'nestjs-cls';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { IdempotencyTransactionalAdapterPrisma } from '../../src/prisma/cls/index.js';
import { PRISMA, type PaymentsTransaction } from './prisma.fixture.js';
import type { PrismaClient } from './prisma/generated/client.js';

type Adapter = IdempotencyTransactionalAdapterPrisma<PrismaClient>;

/** What a request asks of {@link LedgerService.handle}. */
export interface LedgerRequest {
  reference: string;
  /** Throws once everything was written. */
  fail?: boolean;
  /** The nested (savepoint) method throws, and the handler goes on. */
  failNested?: boolean;
  /** Writes through a batch `$transaction([...])` on `txHost.tx` alone. */
  batch?: boolean;
}

/** Services written for @nestjs-cls/transactional, as it documents them. */
@Injectable()
export class LedgerService {
  constructor(
    private readonly txHost: TransactionHost<Adapter>,
    private readonly idempotency: IdempotencyContext<PaymentsTransaction>,
  ) {}

  @Transactional()
  async required(reference: string): Promise<string> {
    return this.write(reference, 'required');
  }

  @Transactional(Propagation.Mandatory)
  async mandatory(reference: string): Promise<string> {
    return this.write(reference, 'mandatory');
  }

  @Transactional(Propagation.RequiresNew)
  async audit(reference: string): Promise<string> {
    return this.write(reference, 'audit');
  }

  @Transactional(Propagation.Nested)
  async nested(reference: string, fail?: boolean): Promise<string> {
    const id = await this.write(reference, 'nested');
    if (fail) {
      throw new Error('nested failure');
    }
    return id;
  }

  @Transactional(Propagation.NotSupported)
  async unsupported(reference: string): Promise<boolean> {
    await this.write(reference, 'unsupported');
    return this.txHost.isTransactionActive();
  }

  @Transactional(Propagation.Never)
  async never(): Promise<void> {}

  /**
   * Writes a payment `<reference>/batch` in a batch `$transaction([...])` on
   * `txHost.tx`; returns the transaction's id.
   */
  @Transactional()
  async batch(reference: string): Promise<string> {
    const tx = this.txHost.tx;
    const [, [{ txid }]] = await tx.$transaction([
      tx.payment.create({ data: { key: `${reference}/batch`, amount: 1 } }),
      tx.$queryRaw<
        Array<{ txid: string }>
      >`SELECT txid_current()::text AS txid`,
    ]);
    return txid;
  }

  async handle(request: LedgerRequest): Promise<Record<string, unknown>> {
    const { reference } = request;
    if (request.batch) {
      const batch = await this.batch(reference);
      const handler = await this.write(reference, 'api');
      if (request.fail) {
        throw new BadRequestException('declined after the batch');
      }
      return { batch, handler };
    }
    const active = this.txHost.isTransactionActive();
    const handle = this.txHost.tx === this.idempotency.transaction;
    const required = await this.required(reference);
    const mandatory = await this.mandatory(reference);
    const audit = await this.audit(reference);
    const nested = await this.nested(reference, request.failNested).catch(
      () => 'failed',
    );
    const unsupported = await this.unsupported(reference);
    // The plugin refuses Never before the method runs: it throws at once.
    const never = await Promise.resolve()
      .then(() => this.never())
      .then(
        () => 'ran',
        (error: Error) => error.name,
      );
    const handler = await this.write(reference, 'api');
    if (request.fail) {
      throw new BadRequestException('declined after the ledger');
    }
    return {
      ...{ active, handle, required, mandatory, audit, nested },
      ...{ unsupported, never, handler },
    };
  }

  /** Outside a decorated handler: the plugin opens its own transaction. */
  @Transactional()
  async plain(request: LedgerRequest): Promise<Record<string, unknown>> {
    await this.write(request.reference, 'plain');
    return { active: this.txHost.isTransactionActive() };
  }

  /** Writes a payment `<reference>/<source>`; returns the transaction's id. */
  private async write(reference: string, source: string): Promise<string> {
    const tx = this.txHost.tx;
    await tx.payment.create({
      data: { key: `${reference}/${source}`, amount: 1 },
    });
    const [{ txid }] = await tx.$queryRaw<
      Array<{ txid: string }>
    >`SELECT txid_current()::text AS txid`;
    return txid;
  }
}

@Controller()
export class LedgerController {
  constructor(private readonly ledger: LedgerService) {}

  @Post('ledger')
  @Idempotent()
  create(@Body() body: LedgerRequest) {
    return this.ledger.handle(body);
  }

  @Post('plain-ledger')
  plain(@Body() body: LedgerRequest) {
    return this.ledger.plain(body);
  }
}

/** The plugin with the module's Prisma adapter, as the guide shows it. */
export function clsModule(): DynamicModule {
  return ClsModule.forRoot({
    global: true,
    middleware: { mount: true },
    plugins: [
      new ClsPluginTransactional({
        adapter: new IdempotencyTransactionalAdapterPrisma<PrismaClient>({
          prismaInjectionToken: PRISMA,
          sqlFlavor: 'postgresql',
        }),
      }),
    ],
  });
}

@Module({ controllers: [LedgerController], providers: [LedgerService] })
export class PrismaClsTestModule {}
