import { Propagation, TransactionHost } from '@nestjs-cls/transactional';
import {
  TransactionalAdapterTypeOrm,
  type TypeOrmTransactionalAdapterOptions,
  type TypeOrmTransactionOptions,
} from '@nestjs-cls/transactional-adapter-typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { LazyTransaction } from '../typeorm/lazy-transaction.js';
import {
  addTransactionParticipant,
  inHandlerTransaction,
  outsideHandlerTransaction,
} from '../typeorm/transaction-participants.js';

/** Options of {@link IdempotencyTransactionalAdapter}. */
export interface IdempotencyTransactionalAdapterOptions extends TypeOrmTransactionalAdapterOptions {
  /**
   * The `connectionName` given to `ClsPluginTransactional`, when it was
   * given one.
   * @default none: the plugin's default connection
   */
  connectionName?: string;
}

/** Marks the transaction that the module's own call hands over. */
const JOIN = Symbol('nestjs-idempotency:join');

type JoiningOptions = TypeOrmTransactionOptions & {
  [JOIN]?: LazyTransaction;
};

/**
 * The TypeORM adapter of `@nestjs-cls/transactional`
 * (`TransactionalAdapterTypeOrm`, whose options it takes) for applications
 * with `@Idempotent()` handlers. Pass it to `ClsPluginTransactional`
 * instead of `TransactionalAdapterTypeOrm`.
 *
 * Inside a decorated handler, the handler's transaction (begun by its first
 * statement, committed with the idempotency record) is the current
 * transaction of `TransactionHost`: `isTransactionActive()` is `true`,
 * `txHost.tx` is its `EntityManager`, `@Transactional()` (`Required`,
 * `Supports`, `Mandatory`) joins it, `Nested` is a savepoint of it, and
 * `Never` refuses to run. `RequiresNew` gets a transaction of its own on
 * another connection, which commits whatever becomes of the handler's.
 * `NotSupported` gives `txHost.tx` a manager outside of any transaction.
 * Outside decorated handlers it is `TransactionalAdapterTypeOrm`.
 *
 * @example
 * ClsModule.forRoot({
 *   global: true,
 *   middleware: { mount: true },
 *   plugins: [
 *     new ClsPluginTransactional({
 *       imports: [TypeOrmModule],
 *       adapter: new IdempotencyTransactionalAdapter({ dataSourceToken: getDataSourceToken() }),
 *     }),
 *   ],
 * })
 */
export class IdempotencyTransactionalAdapter extends TransactionalAdapterTypeOrm {
  private readonly connectionName: string | undefined;
  private dataSource: DataSource | undefined;

  constructor(options: IdempotencyTransactionalAdapterOptions) {
    super(options);
    this.connectionName = options.connectionName;
    const typeorm = this.optionsFactory;
    this.optionsFactory = (dataSource: DataSource) => {
      const adapter = typeorm(dataSource);
      this.dataSource = dataSource;
      addTransactionParticipant(dataSource, {
        join: (transaction, fn) =>
          this.host().withTransaction(
            // Always the adapter's own call below, which starts nothing:
            // even inside another transaction of the plugin (a run() in a
            // @Transactional() method), the handler's is the current one.
            Propagation.RequiresNew,
            { [JOIN]: transaction } as JoiningOptions,
            fn,
          ),
      });
      // Statements outside of any transaction, in a decorated handler too.
      let untransacted: EntityManager | undefined;
      return {
        ...adapter,
        wrapWithTransaction: (
          options: JoiningOptions,
          fn: (...args: unknown[]) => Promise<unknown>,
          setClient: (client?: EntityManager) => void,
        ) => {
          const joined = options?.[JOIN];
          if (joined) {
            setClient(joined.manager);
            return fn();
          }
          return inHandlerTransaction(dataSource)
            ? outsideHandlerTransaction(() =>
                adapter.wrapWithTransaction(options, fn, setClient),
              )
            : adapter.wrapWithTransaction(options, fn, setClient);
        },
        getFallbackInstance: () =>
          inHandlerTransaction(dataSource)
            ? (untransacted ??= dataSource.createEntityManager())
            : adapter.getFallbackInstance(),
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
    // Outside of any request, `tx` is the adapter's fallback manager.
    if (this.dataSource && host.tx !== this.dataSource.manager) {
      throw this.misconfigured(
        `The TransactionHost${this.connectionName ? ` of connection "${this.connectionName}"` : ''} is not the one of this IdempotencyTransactionalAdapter.`,
      );
    }
  }

  private host(): TransactionHost<TransactionalAdapterTypeOrm> {
    try {
      return TransactionHost.getInstance<TransactionalAdapterTypeOrm>(
        this.connectionName,
      );
    } catch (error) {
      throw this.misconfigured((error as Error).message);
    }
  }

  private misconfigured(problem: string): IdempotencyConfigurationError {
    return new IdempotencyConfigurationError(
      `IdempotencyTransactionalAdapter found no TransactionHost of its own: ${problem}`,
      'Pass the adapter to ClsPluginTransactional({ adapter }), in ClsModule.forRoot({ plugins }).',
      'Give the adapter the same `connectionName` as the plugin: new IdempotencyTransactionalAdapter({ dataSourceToken, connectionName }).',
    );
  }
}
