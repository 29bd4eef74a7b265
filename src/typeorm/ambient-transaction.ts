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

/** What the redirect reads of a manager. */
interface ManagerFields {
  readonly queryRunner?: unknown;
  readonly dataSource?: DataSource;
}

/** Methods of the managers that must keep their own meaning. */
const NOT_REDIRECTED = new Set(['constructor', 'release']);

/**
 * How many times each DataSource is bound: only its managers are redirected,
 * and only while it is.
 */
const boundSources = new WeakMap<DataSource, number>();

/** A class of managers whose methods redirect, and how to give them back. */
interface PatchedManagers {
  bindings: number;
  readonly restore: () => void;
}

/** The manager classes patched, by their prototype. */
const patchedManagers = new Map<object, PatchedManagers>();

/**
 * The transaction that a manager without a query runner of its own must
 * write through: the handler's, when one runs on the manager's DataSource
 * and that DataSource is bound.
 */
function ambientTransactionOf(
  manager: ManagerFields,
): LazyTransaction | undefined {
  const transaction = manager.dataSource
    ? handlerTransactionOf(manager.dataSource)
    : undefined;
  return transaction && boundSources.has(transaction.dataSource)
    ? transaction
    : undefined;
}

/**
 * `original`, run instead by the handler's transaction's own manager when
 * it is called on a manager without a query runner of its own while a
 * decorated handler runs on its DataSource.
 *
 * TypeORM's manager takes `this.queryRunner ?? dataSource.createQueryRunner()`
 * (a pool connection, in autocommit) wherever it sends a statement, and
 * passes `this.queryRunner` on to what it makes (query builders,
 * repositories, the persistence of `save()`): a manager without one is
 * redirected as a whole, method by method, rather than given the
 * handler's runner, which its repositories would keep beyond the request
 * (`getRepository()` caches what it makes) and which would bypass the
 * checks of the transaction's own manager (a savepoint at another
 * isolation level is refused there).
 */
function redirecting(name: string, original: AnyFunction): AnyFunction {
  return function (this: ManagerFields, ...args: unknown[]) {
    if (this.queryRunner === undefined) {
      const tx = ambientTransactionOf(this);
      if (tx) {
        return (tx.manager as unknown as Record<string, AnyFunction>)[name](
          ...args,
        );
      }
    }
    return original.apply(this, args);
  };
}

/**
 * Makes every method of the managers of `prototype`'s class (and of the
 * classes it extends) redirect, once for all the DataSources that use it.
 *
 * TypeORM has no hook for the managers it or the application makes
 * (`createEntityManager()`, `new EntityManager(dataSource)`), and they are
 * usually made at startup, before any handler runs: the redirect is
 * decided at each call, on the class they all share, which is patched in
 * place (a prototype put under every manager would need each of them
 * found and changed).
 *
 * @returns a function that gives the methods back.
 */
function patchManagers(prototype: object): () => void {
  return patchMethods(
    prototype,
    (proto) =>
      Object.getOwnPropertyNames(proto).filter(
        (name) => !NOT_REDIRECTED.has(name),
      ),
    redirecting,
  );
}

/**
 * Replaces the methods `names` gives of each class of `prototype`'s chain
 * (the writable functions among them) with `redirect`'s of each.
 * @returns a function that gives them back: a method another library
 * wrapped after this one keeps its wrapper, and the redirect under it,
 * which does nothing once no DataSource is bound.
 */
function patchMethods(
  prototype: object,
  names: (proto: object) => Iterable<string>,
  redirect: (name: string, original: AnyFunction) => AnyFunction,
): () => void {
  const patches: Array<{
    target: Record<string, AnyFunction>;
    name: string;
    original: AnyFunction;
    redirect: AnyFunction;
  }> = [];
  for (
    let proto = prototype as Record<string, AnyFunction> | null;
    proto && proto !== Object.prototype;
    proto = Object.getPrototypeOf(proto) as Record<string, AnyFunction> | null
  ) {
    for (const name of names(proto)) {
      const descriptor = Object.getOwnPropertyDescriptor(proto, name);
      if (typeof descriptor?.value === 'function' && descriptor.writable) {
        const original = descriptor.value as AnyFunction;
        const replaced = redirect(name, original);
        proto[name] = replaced;
        patches.push({ target: proto, name, original, redirect: replaced });
      }
    }
  }
  return () => {
    for (const { target, name, original, redirect: replaced } of patches) {
      if (target[name] === replaced) {
        target[name] = original;
      }
    }
  };
}

/**
 * Counts one more binding of the patch of `prototype` in `patches`,
 * patching it on the first.
 * @returns a function that counts it off, giving the methods back on the
 * last.
 */
function bindPatch(
  patches: Map<object, PatchedManagers>,
  prototype: object,
  patch: (prototype: object) => () => void,
): () => void {
  const patched = patches.get(prototype) ?? {
    bindings: 0,
    restore: patch(prototype),
  };
  patches.set(prototype, patched);
  patched.bindings += 1;
  return () => {
    patched.bindings -= 1;
    if (patched.bindings === 0) {
      patches.delete(prototype);
      patched.restore();
    }
  };
}

/** The query builder classes patched, by their prototype. */
const patchedBuilders = new Map<object, PatchedManagers>();

/**
 * Makes the query builders of `prototype`'s class (and of the classes it
 * extends, TypeORM's `QueryBuilder` among them) take the handler's query
 * runner, where they have none of their own, while a decorated handler runs
 * on their DataSource, once for all the DataSources that use them.
 *
 * A query builder made without a runner (`dataSource.createQueryBuilder()`,
 * a repository's `createQueryBuilder()`, outside of a handler: at startup,
 * in a provider's constructor, to be cloned by each request) takes
 * `dataSource.createQueryRunner()` (a pool connection, in autocommit) when
 * it runs, in `obtainQueryRunner()`: made before the request and run in the
 * handler, its insert would commit at once, apart from the record, and
 * again with each retry. One made in the handler has the runner already
 * (see {@link bindAmbientTransaction}); one made on a runner of its own
 * keeps it, and one made by an `untransactedManager` (nestjs-cls's
 * `NotSupported`) runs out of the handler's context, on a connection of
 * its own.
 *
 * @returns a function that gives the methods back.
 */
function patchQueryBuilders(prototype: object): () => void {
  return patchMethods(
    prototype,
    () => ['obtainQueryRunner'],
    (_name, original) =>
      function (this: ManagerFields, ...args: unknown[]) {
        if (this.queryRunner === undefined) {
          const tx = ambientTransactionOf(this);
          if (tx) {
            return tx.queryRunner;
          }
        }
        return original.apply(this, args) as unknown;
      },
  );
}

/**
 * @internal Makes the application's own data access of `dataSource` write
 * through the ambient transaction while a decorated handler runs: every
 * manager of `dataSource` without a query runner of its own (the default
 * `dataSource.manager`, an injected `EntityManager`, those of
 * `dataSource.createEntityManager()` and `new EntityManager(dataSource)`),
 * every repository built on one (`@InjectRepository`,
 * `dataSource.getRepository()`, custom repositories, `extend()`),
 * `dataSource.query()` and `dataSource.createQueryBuilder()`, and the query
 * builders made without a runner, whenever they were made. A manager
 * made on a query runner (`queryRunner.manager`,
 * `createEntityManager(queryRunner)`) keeps its runner.
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
  boundSources.set(dataSource, (boundSources.get(dataSource) ?? 0) + 1);
  // The class TypeORM makes this DataSource's managers of, read from one
  // made and thrown away (the default manager may be another library's
  // by now).
  const prototype = Object.getPrototypeOf(
    dataSource.createEntityManager(),
  ) as object;
  const unbindManagers = bindPatch(patchedManagers, prototype, patchManagers);
  // The same for its query builders, read from one made and thrown away.
  const unbindBuilders = bindPatch(
    patchedBuilders,
    Object.getPrototypeOf(dataSource.createQueryBuilder()) as object,
    patchQueryBuilders,
  );
  // A method another library set on the default manager itself hides the
  // class's: it is wrapped in place, and given back as it was.
  const manager = dataSource.manager as unknown as Record<string, AnyFunction>;
  const ownMethods = new Map<string, AnyFunction>();
  for (const name of Object.getOwnPropertyNames(manager)) {
    const original = manager[name];
    if (typeof original === 'function' && !NOT_REDIRECTED.has(name)) {
      ownMethods.set(name, original);
      manager[name] = redirecting(name, original);
    }
  }
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
    const bindings = (boundSources.get(dataSource) ?? 1) - 1;
    if (bindings > 0) {
      boundSources.set(dataSource, bindings);
    } else {
      boundSources.delete(dataSource);
    }
    unbindManagers();
    unbindBuilders();
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
