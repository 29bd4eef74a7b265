import {
  Global,
  Inject,
  Injectable,
  Module,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { testPool } from '../utils/test-pool.js';
import { IdempotencyContext } from '../../src/index.js';
import {
  PrismaIdempotencyAdapter,
  type PrismaTransaction,
} from '../../src/prisma/index.js';
import { PaymentsWriter, type AdapterFixture } from './adapter-fixture.js';
import { PrismaClient, type Prisma } from './prisma/generated/client.js';

/** Injection token of the application's PrismaClient. */
export const PRISMA = Symbol('PRISMA');
/** Injection token of the pool PrismaPg writes through. */
export const PRISMA_POOL = Symbol('PRISMA_POOL');

/** The handler's transaction, as the Prisma adapter types it. */
export type PaymentsTransaction = PrismaTransaction<PrismaClient>;

/** The payments handler's statements on Prisma's interactive transaction. */
@Injectable()
export class PrismaPaymentsWriter implements PaymentsWriter {
  constructor(
    private readonly idempotency: IdempotencyContext<PaymentsTransaction>,
  ) {}

  async insertPayment(
    key: string,
    amount: number,
    chargeId: string | null = null,
  ): Promise<number> {
    const payment = await this.idempotency.transaction.payment.create({
      data: { key, amount, chargeId },
    });
    return payment.id;
  }

  async insertLedger(
    paymentId: number,
    amount: number,
    account: string | null = null,
  ): Promise<void> {
    await this.idempotency.transaction.ledgerEntry.create({
      data: { paymentId, account, amount },
    });
  }

  async backendPid(): Promise<number> {
    const [{ pid }] = await this.idempotency.transaction.$queryRaw<
      Array<{ pid: number }>
    >`SELECT pg_backend_pid() AS pid`;
    return pid;
  }

  async raw(sql: string): Promise<void> {
    await this.idempotency.transaction.$executeRawUnsafe(sql);
  }
}

/** The application's client and pool, closed with the application. */
class PrismaCloser implements OnApplicationShutdown {
  constructor(
    @Inject(PRISMA) private readonly prisma: PrismaClient,
    @Inject(PRISMA_POOL) private readonly pool: pg.Pool,
  ) {}

  async onApplicationShutdown(): Promise<void> {
    await this.prisma.$disconnect();
    await this.pool.end();
  }
}

/** How {@link prismaModule} makes its PrismaClient. */
export interface PrismaModuleOptions {
  /** Connections of the pool. @default 5 */
  readonly max?: number;
  /** Options of the PrismaClient beside its adapter. */
  readonly client?: Prisma.PrismaClientBaseOptions;
  /**
   * Gives PrismaPg the pool's settings instead of the pool: PrismaPg then
   * makes a pool of its own.
   */
  readonly settingsOnly?: boolean;
  /** Provides the client extended (`$extends`) by this, in its place. */
  readonly extend?: (prisma: PrismaClient) => object;
}

/**
 * The Nest module of a PrismaClient on `@prisma/adapter-pg`, given a pool
 * (`PRISMA_POOL`) of the database at `url`: global, for the handlers'
 * modules and the nestjs-cls plugin.
 */
export function prismaModule(url: string, options: PrismaModuleOptions = {}) {
  const { max = 5, client, settingsOnly = false, extend } = options;
  @Global()
  @Module({
    providers: [
      {
        provide: PRISMA_POOL,
        useFactory: () => testPool(url, max),
      },
      {
        provide: PRISMA,
        useFactory: (pool: pg.Pool) => {
          const prisma = new PrismaClient({
            ...client,
            adapter: new PrismaPg(
              settingsOnly ? { connectionString: url, max } : pool,
            ),
          });
          return extend ? extend(prisma) : prisma;
        },
        inject: [PRISMA_POOL],
      },
      PrismaCloser,
    ],
    exports: [PRISMA, PRISMA_POOL],
  })
  class PrismaModule {}
  return PrismaModule;
}

/** Prisma 7 on `@prisma/adapter-pg`, given the application's pool. */
export const prismaFixture: AdapterFixture = {
  name: 'prisma',
  setUp(url) {
    return {
      imports: [prismaModule(url)],
      providers: [{ provide: PaymentsWriter, useClass: PrismaPaymentsWriter }],
      adapter: new PrismaIdempotencyAdapter({ prismaToken: PRISMA }),
    };
  },
  poolOf: (app) => app.get<pg.Pool>(PRISMA_POOL),
};
