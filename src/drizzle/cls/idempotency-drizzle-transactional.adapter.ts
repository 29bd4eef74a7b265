import { Propagation, TransactionHost } from '@nestjs-cls/transactional';
import {
  TransactionalAdapterDrizzleOrm,
  type DrizzleOrmTransactionalAdapterOptions,
} from '@nestjs-cls/transactional-adapter-drizzle-orm';
import { addTransactionParticipant } from '../../core/transaction-participants.js';
import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';
import type { HandlerTransaction } from '../../interfaces/handler-transaction.interface.js';
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

/** Marks the transaction that the module's own call hands over. */
const JOIN = Symbol('nestjs-idempotency:join');

type JoiningOptions = { [JOIN]?: HandlerTransaction } | undefined;

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
  private readonly connectionName: string | undefined;
  private db: Db | undefined;

  constructor(options: IdempotencyDrizzleOrmTransactionalAdapterOptions<Db>) {
    super(options);
    this.connectionName = options.connectionName;
    const drizzle = this.optionsFactory;
    this.optionsFactory = (db: Db) => {
      const adapter = drizzle(db);
      this.db = db;
      addTransactionParticipant(db, {
        join: (transaction, fn) =>
          this.host().withTransaction(
            // Always the adapter's own call below, which starts nothing:
            // even inside another transaction of the plugin (a run() in a
            // @Transactional() method), the handler's is the current one.
            Propagation.RequiresNew,
            // Options of no Drizzle transaction: the mark alone.
            { [JOIN]: transaction } as never,
            fn,
          ),
      });
      return {
        ...adapter,
        wrapWithTransaction: (options, fn, setClient) => {
          const joined = (options as JoiningOptions)?.[JOIN];
          if (joined) {
            setClient(joined.manager as Db);
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
    // Outside of any request, `tx` is the adapter's fallback: the database.
    if (this.db && host.tx !== this.db) {
      throw this.misconfigured(
        `The TransactionHost${this.connectionName ? ` of connection "${this.connectionName}"` : ''} is not the one of this IdempotencyTransactionalAdapterDrizzleOrm.`,
      );
    }
  }

  private host(): TransactionHost<TransactionalAdapterDrizzleOrm<Db>> {
    try {
      return TransactionHost.getInstance<TransactionalAdapterDrizzleOrm<Db>>(
        this.connectionName,
      );
    } catch (error) {
      throw this.misconfigured((error as Error).message);
    }
  }

  private misconfigured(problem: string): IdempotencyConfigurationError {
    return new IdempotencyConfigurationError(
      `IdempotencyTransactionalAdapterDrizzleOrm found no TransactionHost of its own: ${problem}`,
      'Pass the adapter to ClsPluginTransactional({ adapter }), in ClsModule.forRoot({ plugins }).',
      'Give the adapter the same `connectionName` as the plugin: new IdempotencyTransactionalAdapterDrizzleOrm({ drizzleInstanceToken, connectionName }).',
    );
  }
}
