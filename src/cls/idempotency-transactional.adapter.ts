import {
  TransactionalAdapterTypeOrm,
  type TypeOrmTransactionalAdapterOptions,
  type TypeOrmTransactionOptions,
} from '@nestjs-cls/transactional-adapter-typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import {
  inHandlerTransaction,
  outsideHandlerTransaction,
  untransactedManager,
} from '../typeorm/transaction-participants.js';
import { HandlerTransactionJoin } from './handler-transaction-join.js';

/** Options of {@link IdempotencyTransactionalAdapter}. */
export interface IdempotencyTransactionalAdapterOptions extends TypeOrmTransactionalAdapterOptions {
  /**
   * The `connectionName` given to `ClsPluginTransactional`, when it was
   * given one.
   * @default none: the plugin's default connection
   */
  connectionName?: string;
}

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
  private readonly join: HandlerTransactionJoin;
  private dataSource: DataSource | undefined;

  constructor(options: IdempotencyTransactionalAdapterOptions) {
    super(options);
    this.join = new HandlerTransactionJoin(
      'IdempotencyTransactionalAdapter',
      options.connectionName,
      'dataSourceToken',
    );
    const typeorm = this.optionsFactory;
    this.optionsFactory = (dataSource: DataSource) => {
      const adapter = typeorm(dataSource);
      this.dataSource = dataSource;
      this.join.participate(dataSource);
      // Statements outside of any transaction, in a decorated handler too.
      let untransacted: EntityManager | undefined;
      return {
        ...this.join.handingOver({
          ...adapter,
          wrapWithTransaction: (
            options: TypeOrmTransactionOptions,
            fn: (...args: unknown[]) => Promise<unknown>,
            setClient: (client?: EntityManager) => void,
          ) =>
            inHandlerTransaction(dataSource)
              ? outsideHandlerTransaction(() =>
                  adapter.wrapWithTransaction(options, fn, setClient),
                )
              : adapter.wrapWithTransaction(options, fn, setClient),
        }),
        getFallbackInstance: () =>
          inHandlerTransaction(dataSource)
            ? (untransacted ??= untransactedManager(dataSource))
            : adapter.getFallbackInstance(),
      };
    };
  }

  /**
   * Checks, once the application has started, that the plugin's
   * `TransactionHost` is this adapter's (outside of any request, its `tx`
   * is the DataSource's manager).
   * @throws IdempotencyConfigurationError when it is not.
   */
  onApplicationBootstrap(): void {
    this.join.checkHost(this.dataSource?.manager);
  }
}
