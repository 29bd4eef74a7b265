import { Propagation, TransactionHost } from '@nestjs-cls/transactional';
import {
  TransactionalAdapterPrisma,
  type PrismaTransactionalAdapterOptions,
} from '@nestjs-cls/transactional-adapter-prisma';
import { addTransactionParticipant } from '../../core/transaction-participants.js';
import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';
import type { HandlerTransaction } from '../../interfaces/handler-transaction.interface.js';
import type { PrismaClientLike, PrismaTransaction } from '../prisma-client.js';

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

/** Marks the transaction that the module's own call hands over. */
const JOIN = Symbol('nestjs-idempotency:join');

type JoiningOptions = { [JOIN]?: HandlerTransaction } | undefined;

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
  private readonly connectionName: string | undefined;
  private prisma: Client | undefined;

  constructor(options: IdempotencyPrismaTransactionalAdapterOptions<Client>) {
    super(options);
    this.connectionName = options.connectionName;
    const prismaAdapter = this.optionsFactory;
    this.optionsFactory = (prisma: Client) => {
      const adapter = prismaAdapter(prisma);
      this.prisma = prisma;
      addTransactionParticipant(prisma, {
        join: (transaction, fn) =>
          this.host().withTransaction(
            // Always the adapter's own call below, which starts nothing:
            // even inside another transaction of the plugin (a run() in a
            // @Transactional() method), the handler's is the current one.
            Propagation.RequiresNew,
            // Options of no Prisma transaction: the mark alone.
            { [JOIN]: transaction } as never,
            fn,
          ),
      });
      return {
        ...adapter,
        wrapWithTransaction: (options, fn, setClient) => {
          const joined = (options as JoiningOptions)?.[JOIN];
          if (joined) {
            setClient(joined.manager as PrismaTransaction<Client>);
            return fn();
          }
          return adapter.wrapWithTransaction(options, fn, setClient);
        },
      };
    };
  }

  /**
   * Checks, once the application has started, that the plugin's
   * `TransactionHost` is this adapter's.
   * @throws IdempotencyConfigurationError when it is not.
   */
  onApplicationBootstrap(): void {
    const host = this.host();
    // Outside of any request, `tx` is the adapter's fallback: the client.
    if (this.prisma && host.tx !== this.prisma) {
      throw this.misconfigured(
        `The TransactionHost${this.connectionName ? ` of connection "${this.connectionName}"` : ''} is not the one of this IdempotencyTransactionalAdapterPrisma.`,
      );
    }
  }

  private host(): TransactionHost<TransactionalAdapterPrisma<Client>> {
    try {
      return TransactionHost.getInstance<TransactionalAdapterPrisma<Client>>(
        this.connectionName,
      );
    } catch (error) {
      throw this.misconfigured((error as Error).message);
    }
  }

  private misconfigured(problem: string): IdempotencyConfigurationError {
    return new IdempotencyConfigurationError(
      `IdempotencyTransactionalAdapterPrisma found no TransactionHost of its own: ${problem}`,
      'Pass the adapter to ClsPluginTransactional({ adapter }), in ClsModule.forRoot({ plugins }).',
      'Give the adapter the same `connectionName` as the plugin: new IdempotencyTransactionalAdapterPrisma({ prismaInjectionToken, connectionName }).',
    );
  }
}
