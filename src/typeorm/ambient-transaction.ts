import type { DataSource } from 'typeorm';
import { handlerContexts } from '../core/handler-context.js';
import { LazyTransaction } from './lazy-transaction.js';

/**
 * @internal The transaction of the decorated handler running, when it is a
 * transaction on `dataSource`: its statements go through it, and are
 * refused once it has ended.
 */
export function handlerTransactionOf(
  dataSource: DataSource,
): LazyTransaction | undefined {
  const transaction = handlerContexts.getStore()?.transaction;
  return transaction instanceof LazyTransaction &&
    transaction.dataSource === dataSource
    ? transaction
    : undefined;
}

type AnyFunction = (...args: unknown[]) => unknown;

/** Methods of the default manager that must keep their own meaning. */
const NOT_REDIRECTED = new Set(['constructor', 'release']);

function methodNames(target: object): string[] {
  const names = new Set<string>();
  for (
    let proto = Object.getPrototypeOf(target) as object | null;
    proto && proto !== Object.prototype;
    proto = Object.getPrototypeOf(proto) as object | null
  ) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      const descriptor = Object.getOwnPropertyDescriptor(proto, name);
      if (
        typeof descriptor?.value === 'function' &&
        !NOT_REDIRECTED.has(name)
      ) {
        names.add(name);
      }
    }
  }
  return [...names];
}

/**
 * @internal Makes the application's own data access of `dataSource` write
 * through the ambient transaction while a decorated handler runs:
 * `dataSource.manager`, an injected `EntityManager`, every repository built on
 * them (`@InjectRepository`, `dataSource.getRepository()`),
 * `dataSource.query()` and `dataSource.createQueryBuilder()`.
 * Outside a handler (no ambient transaction of this DataSource) every call
 * behaves exactly as before.
 *
 * @returns a function that undoes the binding.
 */
export function bindAmbientTransaction(dataSource: DataSource): () => void {
  // The handler's transaction stays the ambient one for as long as code
  // runs in the handler's context: once the module has committed or rolled
  // it back, lost it (its connection broke) or abandoned it at the
  // deadline, the statements of work the handler did not await fail,
  // instead of running, and committing, outside of it (a failed attempt's
  // write would commit without its record, and again with each retry).
  // Hooks of `afterCommit()` run out of the handler's context.
  const current = () => handlerTransactionOf(dataSource);
  // Repositories hold the default manager, so redirecting its methods covers
  // them all, including those created before the module started. The
  // redirecting methods sit on a prototype put under the manager, once:
  // set on the manager itself, as many properties would turn it into a
  // dictionary, which every use of it by TypeORM would then pay for.
  const manager = dataSource.manager as unknown as Record<string, AnyFunction>;
  const managerPrototype = Object.getPrototypeOf(manager) as object;
  const redirecting = Object.create(managerPrototype) as Record<
    string,
    AnyFunction
  >;
  // A method set on the manager itself (by another library) hides the
  // prototype's: it is wrapped in place, and given back as it was.
  const ownMethods = new Map<string, AnyFunction>();
  for (const name of methodNames(manager)) {
    const original = manager[name];
    const redirect = function (this: unknown, ...args: unknown[]) {
      const tx = current();
      return tx
        ? (tx.manager as unknown as Record<string, AnyFunction>)[name](...args)
        : original.apply(this, args);
    };
    if (Object.prototype.hasOwnProperty.call(manager, name)) {
      ownMethods.set(name, original);
      manager[name] = redirect;
    } else {
      redirecting[name] = redirect;
    }
  }
  Object.setPrototypeOf(manager, redirecting);
  const source = dataSource as unknown as Record<string, AnyFunction>;
  // Another library may have set its own (typeorm-transactional does): it
  // is wrapped, and given back as it was.
  const own = (name: string) =>
    Object.prototype.hasOwnProperty.call(source, name)
      ? source[name]
      : undefined;
  const ownQuery = own('query');
  const ownCreateQueryBuilder = own('createQueryBuilder');
  const originalQuery = source.query;
  const originalCreateQueryBuilder = source.createQueryBuilder;
  source.query = function (this: unknown, ...args: unknown[]) {
    const tx = current();
    if (tx && args[2] === undefined) {
      // TypeORM would refuse the released runner, without saying why.
      const closed = tx.closed;
      if (closed) {
        return Promise.reject(closed);
      }
      args[2] = tx.queryRunner;
    }
    return originalQuery.apply(this, args);
  };
  // createQueryBuilder(entity, alias, queryRunner?) or createQueryBuilder(queryRunner?)
  source.createQueryBuilder = function (this: unknown, ...args: unknown[]) {
    const tx = current();
    const runnerAt = typeof args[1] === 'string' ? 2 : 0;
    if (tx && args[runnerAt] === undefined) {
      args[runnerAt] = tx.queryRunner;
    }
    return originalCreateQueryBuilder.apply(this, args);
  };
  return () => {
    if (Object.getPrototypeOf(manager) === redirecting) {
      Object.setPrototypeOf(manager, managerPrototype);
    }
    for (const [name, original] of ownMethods) {
      manager[name] = original;
    }
    restore(source, 'query', ownQuery);
    restore(source, 'createQueryBuilder', ownCreateQueryBuilder);
  };
}

function restore(
  target: Record<string, AnyFunction>,
  name: string,
  own: AnyFunction | undefined,
): void {
  if (own) {
    target[name] = own;
  } else {
    delete target[name];
  }
}
