import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
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
 * A code-first GraphQL API (Apollo driver) whose `placeOrder` mutation writes
 * an order; `idempotent` puts `@Idempotent()` on the mutation.
 */
export function graphqlModule(idempotent: boolean) {
  const mutation = idempotent ? Idempotent() : () => undefined;

  @Resolver(() => OrderModel)
  class OrdersResolver {
    constructor(
      @InjectRepository(Order) private readonly orders: Repository<Order>,
    ) {}

    @Query(() => Int)
    orderCount(): Promise<number> {
      return this.orders.count();
    }

    @Mutation(() => OrderModel)
    @mutation
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
    providers: [OrdersResolver],
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
