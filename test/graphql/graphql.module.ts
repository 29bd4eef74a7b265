import {
  BadRequestException,
  Injectable,
  Module,
  type DynamicModule,
} from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  Args,
  Field,
  GqlExecutionContext,
  GraphQLModule,
  Float,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import type { MercuriusDriverConfig } from '@nestjs/mercurius';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { GraphQLError, GraphQLScalarType, Kind } from 'graphql';
import type { Repository } from 'typeorm';
import { Idempotent, IdempotencyService } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';
import { describeWithRequireEsm } from '../utils/jest-esm.js';
import type { Platform } from '../utils/test-app.js';

/** The GraphQL servers the module is tested with. */
export type GraphqlDriver = 'apollo' | 'mercurius';

/** The GraphQL servers and the HTTP platforms they run on. */
const SERVERS: ReadonlyArray<[GraphqlDriver, Platform]> = [
  ['apollo', 'express'],
  ['apollo', 'fastify'],
  ['mercurius', 'fastify'],
];

/**
 * `tests` on each GraphQL server, as `name (driver on platform)`. Mercurius
 * loads an ES module with require() (content-disposition, through
 * @fastify/static), which Jest does only on newer Node.js versions.
 */
export function describeGraphqlServers(
  name: string,
  tests: (driver: GraphqlDriver, platform: Platform) => void,
): void {
  describe.each(SERVERS.filter(([driver]) => driver === 'apollo'))(
    `${name} (%s on %s)`,
    tests,
  );
  describeWithRequireEsm(`${name} on Mercurius`).each(
    SERVERS.filter(([driver]) => driver === 'mercurius'),
  )(`${name} (%s on %s)`, tests);
}

/** An order as the GraphQL API shows it. */
@ObjectType('PlacedOrder')
export class PlacedOrder {
  @Field(() => Int)
  id!: number;

  @Field(() => String)
  reference!: string;

  @Field(() => String, { nullable: true })
  note?: string;
}

/** An order with dates: `DateTime` scalars, alone, in a list and nested. */
@ObjectType('DatedOrder')
export class DatedOrder {
  @Field(() => Int)
  id!: number;

  @Field(() => Date)
  placedAt!: Date;

  @Field(() => [Date])
  reminders!: Date[];

  @Field(() => PlacedOrder)
  order!: PlacedOrder;
}

/**
 * An order whose date fields are named apart from the properties they read
 * (`@Field({ name })`, as for columns in snake case).
 */
@ObjectType('ShippedOrder')
export class ShippedOrder {
  @Field(() => Int)
  id!: number;

  @Field(() => Date, { name: 'shippedAt' })
  shipped_at!: Date;

  @Field(() => [Date], { name: 'deliveryWindow' })
  delivery_window!: Date[];
}

/**
 * A `BigInt` scalar as the common ones have it (graphql-scalars' shape, no
 * `BigInt.prototype.toJSON`): a `bigint` in, its digits out.
 */
const BigIntScalar = new GraphQLScalarType({
  name: 'BigInt',
  serialize: (value) => {
    if (typeof value === 'bigint') {
      return value.toString();
    }
    if (typeof value === 'string' && /^-?\d+$/.test(value)) {
      return value;
    }
    throw new GraphQLError(`BigInt cannot represent ${String(value)}`);
  },
  parseValue: (value) => BigInt(value as string),
  parseLiteral: (ast) =>
    ast.kind === Kind.INT || ast.kind === Kind.STRING
      ? BigInt(ast.value)
      : null,
});

/** A ledger entry whose amount is a `BigInt`, which JSON cannot write. */
@ObjectType('LedgerEntry')
export class LedgerEntry {
  @Field(() => Int)
  id!: number;

  @Field(() => BigIntScalar)
  cents!: bigint;
}

/** What the resolvers did, and where they wait: set by each test. */
@Injectable()
export class Gate {
  /** Where the resolvers that say so wait. */
  barrier = new Barrier();
  /** How many times each resolver ran. */
  runs: Record<string, number> = {};
  /** How many of the next runs of `placeOrderFailing` fail after writing. */
  failures = 0;

  ran(name: string): void {
    this.runs[name] = (this.runs[name] ?? 0) + 1;
  }
}

/** Mutations decorated one by one, each with the options it tests. */
@Resolver(() => PlacedOrder)
export class OrdersResolver {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly gate: Gate,
    private readonly idempotency: IdempotencyService,
  ) {}

  private async write(reference: string, note?: string): Promise<PlacedOrder> {
    const order = await this.orders.save(this.orders.create({ reference }));
    return { id: order.id, reference: order.reference, note };
  }

  @Mutation(() => PlacedOrder)
  @Idempotent()
  placeOrder(
    @Args('reference', { type: () => String }) reference: string,
    @Args('note', { type: () => String, nullable: true }) note?: string,
  ): Promise<PlacedOrder> {
    this.gate.ran('placeOrder');
    return this.write(reference, note);
  }

  /** Tells `-0` from `0`, as a resolver may (`Object.is`). */
  @Mutation(() => String)
  @Idempotent()
  signOf(@Args('value', { type: () => Float }) value: number): string {
    this.gate.ran('signOf');
    return Object.is(value, -0) ? 'negative zero' : String(Math.sign(value));
  }

  /** Returns dates, which JSON stores as strings. */
  @Mutation(() => DatedOrder)
  @Idempotent()
  async placeDatedOrder(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<DatedOrder> {
    this.gate.ran('placeDatedOrder');
    const order = await this.write(reference);
    return {
      id: order.id,
      placedAt: new Date(Date.UTC(2026, 10, 30, 12, 0, 0)),
      reminders: [
        new Date(Date.UTC(2026, 11, 1)),
        new Date(Date.UTC(2026, 11, 2)),
      ],
      order,
    };
  }

  /** Returns dates under properties that its fields name otherwise. */
  @Mutation(() => ShippedOrder)
  @Idempotent()
  async shipOrder(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<ShippedOrder> {
    this.gate.ran('shipOrder');
    const order = await this.write(reference);
    return {
      id: order.id,
      shipped_at: new Date(Date.UTC(2026, 10, 30, 9, 30, 0)),
      delivery_window: [
        new Date(Date.UTC(2026, 11, 1, 8)),
        new Date(Date.UTC(2026, 11, 1, 12)),
      ],
    };
  }

  /** Returns a `BigInt`, which the scalar writes as its digits. */
  @Mutation(() => LedgerEntry)
  @Idempotent()
  async bookLedgerEntry(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<LedgerEntry> {
    this.gate.ran('bookLedgerEntry');
    const order = await this.write(reference);
    return { id: order.id, cents: 12345678901234567890n };
  }

  /** Waits at the barrier (a gateway call) before its first statement. */
  @Mutation(() => PlacedOrder)
  @Idempotent()
  async placeOrderGated(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<PlacedOrder> {
    this.gate.ran('placeOrderGated');
    await this.gate.barrier.wait();
    return this.write(reference);
  }

  /** Writes, then waits at the barrier before it returns. */
  @Mutation(() => PlacedOrder)
  @Idempotent()
  async placeOrderHeld(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<PlacedOrder> {
    this.gate.ran('placeOrderHeld');
    const order = await this.write(reference);
    await this.gate.barrier.wait();
    return order;
  }

  /** Waits like `placeOrderGated`; a duplicate waits for it to finish. */
  @Mutation(() => PlacedOrder)
  @Idempotent({ concurrency: 'wait' })
  async placeOrderWaited(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<PlacedOrder> {
    this.gate.ran('placeOrderWaited');
    await this.gate.barrier.wait();
    return this.write(reference);
  }

  /** Writes, then fails while `gate.failures` says so. */
  @Mutation(() => PlacedOrder)
  @Idempotent()
  async placeOrderFailing(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<PlacedOrder> {
    this.gate.ran('placeOrderFailing');
    const order = await this.write(reference);
    if (this.gate.failures > 0) {
      this.gate.failures -= 1;
      throw new Error('The warehouse is closed');
    }
    return order;
  }

  /**
   * Writes, then refuses the order: with a 4xx the error policy stores (an
   * `HttpException`, or for `sold-out` a `GraphQLError` whose
   * `extensions.http.status` is 409), or for `crash` with a plain error, a
   * 500 it does not store. While `gate.failures` says so, a statement of
   * its fails first with a serialization failure, which it catches.
   */
  @Mutation(() => PlacedOrder)
  @Idempotent({ storeErrors: true })
  async placeOrderRefused(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<PlacedOrder> {
    this.gate.ran('placeOrderRefused');
    await this.write(reference);
    if (this.gate.failures > 0) {
      this.gate.failures -= 1;
      await this.orders
        .query(
          "DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END $$",
        )
        .catch(() => undefined);
    }
    if (reference === 'crash') {
      throw new Error('The stock service crashed');
    }
    if (reference.endsWith('nested-reused')) {
      // A nested run() under a key a run() of other work took: the
      // module's 422, thrown through the resolver.
      for (const fingerprint of ['reserve', 'release']) {
        await this.idempotency.run(
          { key: reference, scope: 'stock', fingerprint },
          () => Promise.resolve(fingerprint),
        );
      }
    }
    if (reference.endsWith('sold-out')) {
      throw new GraphQLError(`Sold out: ${reference}`, {
        extensions: { code: 'SOLD_OUT', http: { status: 409 }, retry: false },
      });
    }
    throw new BadRequestException(`Out of stock: ${reference}`);
  }

  /** Runs past its deadline: the client gets the module's 503. */
  @Mutation(() => PlacedOrder)
  @Idempotent({ transactionTimeout: '300ms' })
  async placeOrderLate(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<PlacedOrder> {
    this.gate.ran('placeOrderLate');
    await this.gate.barrier.wait();
    return this.write(reference);
  }

  /** Keyed by an argument of the mutation instead of the header. */
  @Mutation(() => PlacedOrder)
  @Idempotent({
    key: (context) =>
      GqlExecutionContext.create(context).getArgs<{ reference: string }>()
        .reference,
  })
  placeOrderByReference(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<PlacedOrder> {
    this.gate.ran('placeOrderByReference');
    return this.write(reference);
  }
}

/**
 * A resolver decorated as a whole: its mutation is idempotent, its query
 * (which needs no key) is left alone.
 */
@Resolver()
@Idempotent()
export class CatalogResolver {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly gate: Gate,
  ) {}

  @Query(() => Int)
  orderCount(): Promise<number> {
    return this.orders.count();
  }

  @Mutation(() => Int)
  async restock(
    @Args('reference', { type: () => String }) reference: string,
  ): Promise<number> {
    this.gate.ran('restock');
    const order = await this.orders.save(
      this.orders.create({ reference, source: 'restock' }),
    );
    return order.id;
  }
}

/**
 * The GraphQL server of `driver`, code first. Mercurius is loaded only when
 * used: it needs Node.js 22 under Jest (see the spec).
 */
async function graphqlServer(driver: GraphqlDriver): Promise<DynamicModule> {
  if (driver === 'apollo') {
    return GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      // Errors are compared whole: without the stack of each throw.
      includeStacktraceInErrorResponses: false,
    });
  }
  const { MercuriusDriver } = await import('@nestjs/mercurius');
  return GraphQLModule.forRoot<MercuriusDriverConfig>({
    driver: MercuriusDriver,
    autoSchemaFile: true,
    graphiql: false,
  });
}

/** The test's GraphQL API on `driver`. */
export async function graphqlTestModule(
  driver: GraphqlDriver,
): Promise<DynamicModule> {
  @Module({})
  class GraphqlTestModule {}
  return {
    module: GraphqlTestModule,
    imports: [await graphqlServer(driver), TypeOrmModule.forFeature([Order])],
    providers: [Gate, OrdersResolver, CatalogResolver],
  };
}
