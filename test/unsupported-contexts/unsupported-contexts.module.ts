import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
  Subscription,
} from '@nestjs/graphql';
import { Cron } from '@nestjs/schedule';
import {
  MessageBody,
  SubscribeMessage,
  WebSocketGateway,
} from '@nestjs/websockets';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

/** An order as the GraphQL API shows it. */
@ObjectType('Order')
export class OrderModel {
  @Field(() => Int)
  id!: number;

  @Field(() => String)
  reference!: string;
}

/**
 * Where `graphqlModule` puts `@Idempotent()`: on a query, a subscription, a
 * field resolver, or on the resolver class (which then has no mutation).
 */
export type GraphqlDecoration = 'query' | 'subscription' | 'field' | 'class';

/**
 * A code-first GraphQL API (Apollo driver) whose `placeOrder` mutation writes
 * an order; `decorated` says where it carries `@Idempotent()`, if anywhere.
 */
export function graphqlModule(decorated?: GraphqlDecoration) {
  const on = (where: GraphqlDecoration) =>
    decorated === where ? Idempotent() : () => undefined;

  @Resolver(() => OrderModel)
  @on('class')
  class OrdersResolver {
    constructor(
      @InjectRepository(Order) private readonly orders: Repository<Order>,
    ) {}

    @Query(() => Int)
    @on('query')
    orderCount(): Promise<number> {
      return this.orders.count();
    }

    @Subscription(() => OrderModel)
    @on('subscription')
    orderPlaced(): AsyncIterator<OrderModel> {
      return [][Symbol.iterator]() as unknown as AsyncIterator<OrderModel>;
    }

    @ResolveField(() => String)
    @on('field')
    label(@Parent() order: OrderModel): string {
      return `#${order.id} ${order.reference}`;
    }
  }

  /** The mutation, in a resolver of its own unless the class is decorated. */
  @Resolver(() => OrderModel)
  class PlaceOrderResolver {
    constructor(
      @InjectRepository(Order) private readonly orders: Repository<Order>,
    ) {}

    @Mutation(() => OrderModel)
    placeOrder(
      @Args('reference', { type: () => String }) reference: string,
    ): Promise<OrderModel> {
      return this.orders.save(this.orders.create({ reference }));
    }
  }

  @Module({
    imports: [
      GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
      }),
      TypeOrmModule.forFeature([Order]),
    ],
    providers: [OrdersResolver, PlaceOrderResolver],
  })
  class OrdersGraphqlModule {}
  return OrdersGraphqlModule;
}

/** A WebSocket gateway on the application's HTTP server. */
@WebSocketGateway()
export class OrdersGateway {
  @SubscribeMessage('place-order')
  @Idempotent()
  placeOrder(@MessageBody() reference: string) {
    return { reference };
  }
}

/** A provider whose method is called by the application's own code. */
@Injectable()
export class OrdersImporter {
  @Idempotent()
  importOrder(reference: string) {
    return { reference };
  }
}

/** A provider decorated as a whole, with no handler of any kind. */
@Injectable()
@Idempotent()
export class OrdersArchiver {
  archive(reference: string) {
    return { reference };
  }
}

/** A scheduled job. */
@Injectable()
export class OrdersReport {
  @Cron('0 3 * * *')
  @Idempotent()
  nightly() {
    return 'sent';
  }
}

/** A controller decorated as a whole, with a helper method beside its route. */
@Controller('orders')
@Idempotent()
export class OrdersController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @Post()
  create(@Body() body: { reference: string }) {
    return this.orders.save(
      this.orders.create({ reference: this.normalize(body.reference) }),
    );
  }

  normalize(reference: string): string {
    return reference.trim();
  }
}

/** A controller whose helper method carries `@Idempotent()` of its own. */
@Controller('refunds')
export class RefundsController {
  @Post()
  refund() {
    return this.record();
  }

  @Idempotent()
  record() {
    return { refunded: true };
  }
}
