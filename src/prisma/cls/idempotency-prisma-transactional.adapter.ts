import {
  TransactionalAdapterPrisma,
  type PrismaTransactionalAdapterOptions,
} from '@nestjs-cls/transactional-adapter-prisma';
import { HandlerTransactionJoin } from '../../cls/handler-transaction-join.js';
import type { PrismaClientLike } from '../prisma-client.js';

/** Options of {@link IdempotencyTransactionalAdapterPrisma}. */
export interface IdempotencyPrismaTransactionalAdapterOptions<
  Client extends PrismaClientLike,
> extends PrismaTransactionalAdapterOptions<Client> {
  /**
   * The `connectionName` given to `ClsPluginTransactional`, when it was
   * given one.
   * @default none: the plugin's default connection
   */
  connectionName?: string;
}

/**
 * The Prisma adapter of `@nestjs-cls/transactional`
 * (`TransactionalAdapterPrisma`, whose options it takes) for applications
 * whose `@Idempotent()` handlers run on `PrismaIdempotencyAdapter`. Pass it
 * to `ClsPluginTransactional` instead of `TransactionalAdapterPrisma`, with
 * the same PrismaClient token (`prismaInjectionToken`) as the module's
 * adapter (`prismaToken`).
 *
 * Inside a decorated handler, the handler's interactive transaction (begun
 * by its first statement, committed with the idempotency record) is the
 * current transaction of `TransactionHost`: `isTransactionActive()` is
 * `true`, `txHost.tx` is the handler's `tx` (the one
 * `IdempotencyContext.transaction` gives), `@Transactional()` (`Required`,
 * `Supports`, `Mandatory`) joins it, `Nested` is a savepoint of it (with
 * the `sqlFlavor: 'postgresql'` option, as `TransactionalAdapterPrisma`
 * has it), and `Never` refuses to run. `RequiresNew` gets a transaction of
 * its own on another connection (`prisma.$transaction()`), which commits
 * whatever becomes of the handler's. `NotSupported` gives `txHost.tx` the
 * PrismaClient, outside of any transaction. Outside decorated handlers it
 * is `TransactionalAdapterPrisma`.
 *
 * @example
 * ClsModule.forRoot({
 *   global: true,
 *   middleware: { mount: true },
 *   plugins: [
 *     new ClsPluginTransactional({
 *       imports: [PrismaModule],
 *       adapter: new IdempotencyTransactionalAdapterPrisma({
 *         prismaInjectionToken: PrismaService,
 *         sqlFlavor: 'postgresql',
 *       }),
 *     }),
 *   ],
 * })
 */
export class IdempotencyTransactionalAdapterPrisma<
  Client extends PrismaClientLike,
> extends TransactionalAdapterPrisma<Client> {
  private readonly join: HandlerTransactionJoin;
  private prisma: Client | undefined;

  constructor(options: IdempotencyPrismaTransactionalAdapterOptions<Client>) {
    super(options);
    this.join = new HandlerTransactionJoin(
      'IdempotencyTransactionalAdapterPrisma',
      options.connectionName,
      'prismaInjectionToken',
    );
    const ownAdapter = this.optionsFactory;
    this.optionsFactory = (prisma: Client) => {
      this.prisma = prisma;
      this.join.participate(prisma);
      return this.join.handingOver(ownAdapter(prisma));
    };
  }

  /**
   * Checks, once the application has started, that the plugin's
   * `TransactionHost` is this adapter's (outside of any request, its `tx` is the client).
   * @throws IdempotencyConfigurationError when it is not.
   */
  onApplicationBootstrap(): void {
    this.join.checkHost(this.prisma);
  }
}
