import {
  TransactionalAdapterDrizzleOrm,
  type DrizzleOrmTransactionalAdapterOptions,
} from '@nestjs-cls/transactional-adapter-drizzle-orm';
import { HandlerTransactionJoin } from '../../cls/handler-transaction-join.js';
import type { DrizzleDatabase } from '../drizzle-transaction.js';

/** Options of {@link IdempotencyTransactionalAdapterDrizzleOrm}. */
export interface IdempotencyDrizzleOrmTransactionalAdapterOptions<
  Db extends DrizzleDatabase,
> extends DrizzleOrmTransactionalAdapterOptions<Db> {
  /**
   * The `connectionName` given to `ClsPluginTransactional`, when it was
   * given one.
   * @default none: the plugin's default connection
   */
  connectionName?: string;
}

/**
 * The Drizzle adapter of `@nestjs-cls/transactional`
 * (`TransactionalAdapterDrizzleOrm`, whose options it takes) for
 * applications whose `@Idempotent()` handlers run on
 * `DrizzleIdempotencyAdapter`. Pass it to `ClsPluginTransactional` instead
 * of `TransactionalAdapterDrizzleOrm`, with the same `drizzleInstanceToken`
 * as the module's adapter.
 *
 * Inside a decorated handler, the handler's transaction (begun by its
 * first statement, committed with the idempotency record) is the current
 * transaction of `TransactionHost`: `isTransactionActive()` is `true`,
 * `txHost.tx` is the handler's Drizzle transaction (the one
 * `IdempotencyContext.transaction` gives), `@Transactional()` (`Required`,
 * `Supports`, `Mandatory`) joins it, `Nested` is a savepoint of it, and
 * `Never` refuses to run. `RequiresNew` gets a transaction of its own on
 * another connection (`db.transaction()`), which commits whatever becomes
 * of the handler's. `NotSupported` gives `txHost.tx` the application's
 * database, outside of any transaction. Outside decorated handlers it is
 * `TransactionalAdapterDrizzleOrm`.
 *
 * @example
 * ClsModule.forRoot({
 *   global: true,
 *   middleware: { mount: true },
 *   plugins: [
 *     new ClsPluginTransactional({
 *       imports: [DrizzleModule],
 *       adapter: new IdempotencyTransactionalAdapterDrizzleOrm({ drizzleInstanceToken: DRIZZLE }),
 *     }),
 *   ],
 * })
 */
export class IdempotencyTransactionalAdapterDrizzleOrm<
  Db extends DrizzleDatabase,
> extends TransactionalAdapterDrizzleOrm<Db> {
  private readonly join: HandlerTransactionJoin;
  private db: Db | undefined;

  constructor(options: IdempotencyDrizzleOrmTransactionalAdapterOptions<Db>) {
    super(options);
    this.join = new HandlerTransactionJoin(
      'IdempotencyTransactionalAdapterDrizzleOrm',
      options.connectionName,
      'drizzleInstanceToken',
    );
    const ownAdapter = this.optionsFactory;
    this.optionsFactory = (db: Db) => {
      this.db = db;
      this.join.participate(db);
      return this.join.handingOver(ownAdapter(db));
    };
  }

  /**
   * Checks, once the application has started, that the plugin's
   * `TransactionHost` is this adapter's (outside of any request, its `tx` is the database).
   * @throws IdempotencyConfigurationError when it is not.
   */
  onApplicationBootstrap(): void {
    this.join.checkHost(this.db);
  }
}
