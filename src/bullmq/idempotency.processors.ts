import {
  Injectable,
  type BeforeApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { DiscoveryService, Reflector } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';
import { IDEMPOTENT_METADATA } from '../idempotency.constants.js';
import { HANDLER_METADATA } from '../idempotency.handlers.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import {
  IdempotencyJobs,
  type DecoratedProcessor,
  type ProcessMethod,
  type QueueJob,
} from './idempotency.jobs.js';

type Type = abstract new (...args: never[]) => unknown;

/** A processor instance of one application and how its jobs run. */
interface Binding {
  readonly wrapper: InstanceWrapper;
  readonly processor: DecoratedProcessor;
  readonly jobs: IdempotencyJobs;
}

/** The wrapper's bindings whose instance its application has not made yet. */
const PENDING = Symbol('idempotency:pending processors');

type IdempotentProcess = ProcessMethod & { [PENDING]: Set<Binding> };

/**
 * The BullMQ worker of a processor (`WorkerHost.worker`), once
 * @nestjs/bullmq made it; `undefined` before (its getter throws then).
 */
function workerOf(instance: unknown): { close(): Promise<void> } | undefined {
  try {
    return (instance as { worker?: { close(): Promise<void> } } | undefined)
      ?.worker;
  } catch {
    return undefined;
  }
}

/** Processor instances (of any application in the process) and their binding. */
const bound = new WeakMap<object, Binding>();

/**
 * The class a provider makes, as @nestjs/bullmq's explorer finds it: a
 * factory's or a value's by its instance.
 */
function providedClass(wrapper: InstanceWrapper): Type | undefined {
  const type: unknown =
    !wrapper.metatype || wrapper.inject
      ? (wrapper.instance as object | undefined)?.constructor
      : wrapper.metatype;
  // An arrow function (some libraries' factories) has no prototype.
  return typeof type === 'function' && type.prototype !== undefined
    ? (type as Type)
    : undefined;
}

/**
 * Replaces the `process` method where `type`'s prototype chain defines it by
 * one that runs the jobs of bound instances through the module, and those of
 * any other instance as before. Once per method: a second application (or a
 * second processor class inheriting the method) adds its bindings to it.
 */
function wrapProcess(type: Type): IdempotentProcess {
  let owner = type.prototype as object | null;
  while (owner && !Object.hasOwn(owner, 'process')) {
    owner = Object.getPrototypeOf(owner) as object | null;
  }
  const descriptor = Object.getOwnPropertyDescriptor(owner!, 'process')!;
  const current = descriptor.value as ProcessMethod | IdempotentProcess;
  if (PENDING in current) {
    return current;
  }
  const original = current;
  const pending = new Set<Binding>();
  const idempotentProcess = function (
    this: object,
    job: QueueJob,
    token?: string,
    // BullMQ's abort signal (`worker.cancelJob()`), and whatever else it
    // passes: the method gets every argument it would get undecorated.
    ...rest: unknown[]
  ): Promise<unknown> {
    let binding = bound.get(this);
    if (!binding) {
      for (const candidate of pending) {
        if (candidate.wrapper.instance === this) {
          binding = candidate;
        }
      }
    }
    return binding
      ? binding.jobs.execute(binding.processor, job, token, () =>
          original.call(this, job, token, ...rest),
        )
      : original.call(this, job, token, ...rest);
  } as IdempotentProcess;
  idempotentProcess[PENDING] = pending;
  Object.defineProperty(idempotentProcess, 'name', { value: original.name });
  // BullMQ hands a processor its abort signal only when the function
  // declares a third parameter (its `length`): the wrapper declares what
  // the method does.
  Object.defineProperty(idempotentProcess, 'length', {
    value: original.length,
  });
  // `@Idempotent()` and every other decorator of the method stay readable.
  for (const key of Reflect.getOwnMetadataKeys(original)) {
    Reflect.defineMetadata(
      key,
      Reflect.getOwnMetadata(key, original),
      idempotentProcess,
    );
  }
  Object.defineProperty(owner!, 'process', {
    ...descriptor,
    value: idempotentProcess,
  });
  return idempotentProcess;
}

/**
 * @internal Makes `@Idempotent()` on the `process(job, token?)` method of
 * `@nestjs/bullmq` processors work. Nest runs no interceptor for a job:
 * @nestjs/bullmq's `BullRegistrar` reads `instance.process` in its
 * `onModuleInit` and hands it, bound, to the `Worker` it creates. Among
 * global modules such as both of these, the order of `onModuleInit` is the
 * order of the imports, so the module cannot count on wrapping the instance
 * first. The one thing that surely precedes every `onModuleInit` is the
 * making of the providers: this class, as it is made, replaces `process` on
 * the decorated processor classes by a wrapper (on the prototype: the
 * processor instances may not exist yet), which runs a job through the
 * module for the instances of this application and leaves others alone.
 * @nestjs/bullmq is optional: its metadata is read by its plain string key.
 */
@Injectable()
export class IdempotencyProcessors
  implements OnModuleInit, BeforeApplicationShutdown
{
  private readonly bindings: Array<[IdempotentProcess, Binding]> = [];

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly reflector: Reflector,
    jobs: IdempotencyJobs,
  ) {
    for (const wrapper of discovery.getProviders()) {
      const type = providedClass(wrapper);
      if (!type || !this.decorated(type)) {
        continue;
      }
      const handler = wrapProcess(type);
      const binding = { wrapper, processor: { type, handler }, jobs };
      handler[PENDING].add(binding);
      this.bindings.push([handler, binding]);
    }
  }

  /**
   * The instances exist now: binds them, and refuses the decorated
   * processors the wrapper cannot reach.
   * @throws IdempotencyConfigurationError for a processor made by a factory
   * or request-scoped.
   */
  onModuleInit(): void {
    for (const [handler, binding] of this.bindings) {
      handler[PENDING].delete(binding);
      const instance = binding.wrapper.instance as object | undefined;
      if (instance) {
        bound.set(instance, binding);
      }
    }
    const unreachable: string[] = [];
    for (const wrapper of this.discovery.getProviders()) {
      const type = providedClass(wrapper);
      if (!type || !this.decorated(type)) {
        continue;
      }
      const instance = wrapper.instance as object | undefined;
      if (!wrapper.isDependencyTreeStatic()) {
        unreachable.push(`${type.name} (request-scoped)`);
      } else if (instance && !bound.has(instance)) {
        unreachable.push(`${type.name} (made by a factory)`);
      }
    }
    if (unreachable.length > 0) {
      throw new IdempotencyConfigurationError(
        `@Idempotent() cannot act on the BullMQ processor ${unreachable.join(', ')}: the module makes idempotent the process() method of processors that are singleton class or value providers.`,
        'Register the processor class itself as a provider (providers: [MyProcessor]), without a request scope.',
        'Or inject IdempotencyService into the processor and wrap the work in run({ scope, key }, fn).',
      );
    }
  }

  /**
   * Closes the workers of the decorated processors, which wait for their
   * active jobs, before any `onApplicationShutdown`. @nestjs/bullmq closes
   * them in its own `onApplicationShutdown`, and Nest shuts modules down
   * in the reverse order of their imports: with BullMQ imported before the
   * module, its jobs would still run after the module stopped renewing
   * their claims and closed its presence session, and another instance
   * would take a running job's key over (and run it beside it). A worker
   * closed twice closes once.
   */
  async beforeApplicationShutdown(): Promise<void> {
    await Promise.all(
      this.bindings.map(
        ([, binding]) =>
          workerOf(binding.wrapper.instance)?.close() ?? Promise.resolve(),
      ),
    );
  }

  /** Whether `type` is a processor whose `process` is `@Idempotent()`. */
  private decorated(type: Type): boolean {
    const process = (type.prototype as { process?: unknown }).process;
    return (
      this.reflector.get(HANDLER_METADATA.bullmqProcessor, type) !==
        undefined &&
      typeof process === 'function' &&
      this.reflector.getAllAndOverride(IDEMPOTENT_METADATA, [process, type]) !==
        undefined
    );
  }
}
