import {
  Propagation,
  TransactionHost,
  type TransactionalAdapterOptions,
} from '@nestjs-cls/transactional';
import { addTransactionParticipant } from '../core/transaction-participants.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { HandlerTransaction } from '../interfaces/handler-transaction.interface.js';
import { messageOf } from '../core/error-message.js';

/**
 * What an adapter of the plugin gives it, whatever its library: its
 * transaction handle and options are the library adapter's own types.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type PluginAdapter = TransactionalAdapterOptions<any, any>;

/** Marks the transaction that the module's own call hands over. */
const JOIN = Symbol('nestjs-idempotency:join');

/** The options of that call: the mark alone. */
type JoiningOptions = { readonly [JOIN]?: HandlerTransaction } | undefined;

/**
 * @internal What the module's adapters of `@nestjs-cls/transactional`
 * (TypeORM's, Drizzle's, Prisma's) share: each is the library's own adapter,
 * whose `TransactionHost` sees the transaction of a decorated handler as its
 * current one while the handler runs. The module runs the handler inside a
 * call of the plugin that starts nothing and hands the handler's
 * transaction over ({@link participate}); the adapter's
 * `wrapWithTransaction` gives it to the plugin ({@link joined}).
 */
export class HandlerTransactionJoin {
  constructor(
    /** The adapter's class name, for messages. */
    private readonly adapterName: string,
    /** The `connectionName` given to `ClsPluginTransactional`, if any. */
    readonly connectionName: string | undefined,
    /** The option of the adapter that names the client's token. */
    private readonly tokenOption: string,
  ) {}

  /**
   * Makes the plugin see the transaction of every decorated handler on
   * `client` as its current one.
   */
  participate(client: object): void {
    addTransactionParticipant(client, {
      join: (transaction, fn) =>
        this.host().withTransaction(
          // Always the adapter's own call, which starts nothing: even inside
          // another transaction of the plugin (a run() in a @Transactional()
          // method), the handler's is the current one.
          Propagation.RequiresNew,
          { [JOIN]: transaction } as never,
          fn,
        ),
    });
  }

  /** The handler's transaction that the plugin's call `options` hands over. */
  joined(options: unknown): HandlerTransaction | undefined {
    return (options as JoiningOptions)?.[JOIN];
  }

  /**
   * `adapter` (the library adapter's options for the plugin), whose
   * transaction is the handler's handle when the call hands one over.
   */
  handingOver<Adapter extends PluginAdapter>(adapter: Adapter): Adapter {
    const wrapWithTransaction: PluginAdapter['wrapWithTransaction'] = (
      options,
      fn,
      setTx,
    ) => {
      const joined = this.joined(options);
      if (joined) {
        setTx(joined.manager);
        return fn();
      }
      return adapter.wrapWithTransaction(options, fn, setTx);
    };
    return { ...adapter, wrapWithTransaction };
  }

  /**
   * Checks, once the application has started, that the plugin's
   * `TransactionHost` is the adapter's: outside of any request, its `tx`
   * is the adapter's `fallback`.
   * @throws IdempotencyConfigurationError when it is not.
   */
  checkHost(fallback: unknown): void {
    const host = this.host();
    if (fallback !== undefined && host.tx !== fallback) {
      throw this.misconfigured(
        `The TransactionHost${this.connectionName ? ` of connection "${this.connectionName}"` : ''} is not the one of this ${this.adapterName}.`,
      );
    }
  }

  /**
   * The plugin's `TransactionHost` of the adapter's connection.
   * @throws IdempotencyConfigurationError when there is none.
   */
  host<Adapter = never>(): TransactionHost<Adapter> {
    try {
      return TransactionHost.getInstance<Adapter>(this.connectionName);
    } catch (error) {
      throw this.misconfigured(messageOf(error));
    }
  }

  private misconfigured(problem: string): IdempotencyConfigurationError {
    return new IdempotencyConfigurationError(
      `${this.adapterName} found no TransactionHost of its own: ${problem}`,
      'Pass the adapter to ClsPluginTransactional({ adapter }), in ClsModule.forRoot({ plugins }).',
      `Give the adapter the same \`connectionName\` as the plugin: new ${this.adapterName}({ ${this.tokenOption}, connectionName }).`,
    );
  }
}
