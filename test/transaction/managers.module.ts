import {
  Body,
  Controller,
  Injectable,
  Module,
  Post,
  ServiceUnavailableException,
} from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import {
  DataSource,
  EntityManager,
  Repository,
  type SelectQueryBuilder,
} from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

/**
 * The custom repository of TypeORM 0.3 and later, as NestJS applications
 * write it: on a manager of its own, made at startup.
 */
@Injectable()
export class OrderRepository extends Repository<Order> {
  constructor(dataSource: DataSource) {
    super(Order, dataSource.createEntityManager());
  }

  /** A method of its own, as custom repositories have. */
  placeOrder(reference: string, source: string): Promise<Order> {
    return this.save(this.create({ reference, source }));
  }
}

/**
 * A custom repository with TypeORM's own constructor, which
 * `manager.withRepository()` can make again on another manager.
 */
export class LedgerRepository extends Repository<Order> {
  record(reference: string, source: string): Promise<unknown> {
    return this.insert({ reference, source });
  }
}

/** A request to `/managers`: the way to write, and when to succeed. */
export interface ManagerRequest {
  reference: string;
  via: string;
  /** The attempts that answer 503 before one succeeds. */
  failures?: number;
}

/**
 * Writes an order through managers the application made itself, each made
 * once, at startup, before any handler runs.
 */
@Injectable()
export class ManagersService {
  /** The attempts of each reference, failed ones included. */
  readonly attempts = new Map<string, number>();
  private readonly manager: EntityManager;
  private readonly created: EntityManager;
  private readonly ledger: LedgerRepository;
  /** Query builders made at startup, with no runner, cloned by each request. */
  private readonly prebuilt: SelectQueryBuilder<Order>;
  private readonly prebuiltOrders: SelectQueryBuilder<Order>;

  constructor(
    readonly orders: OrderRepository,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {
    this.manager = new EntityManager(dataSource);
    this.created = dataSource.createEntityManager();
    this.ledger = new LedgerRepository(Order, dataSource.createEntityManager());
    this.prebuilt = dataSource.createQueryBuilder();
    this.prebuiltOrders = orders.createQueryBuilder();
  }

  /** One insert of `reference` per way of writing, with `via` as its source. */
  readonly ways: Record<string, (reference: string) => Promise<unknown>> = {
    customRepository: (reference) =>
      this.orders.placeOrder(reference, 'customRepository'),
    customRepositoryQueryBuilder: (reference) =>
      this.orders
        .createQueryBuilder()
        .insert()
        .values({ reference, source: 'customRepositoryQueryBuilder' })
        .execute(),
    extendedRepository: (reference) =>
      this.ledger
        .extend({
          placeExtended(this: Repository<Order>, value: string) {
            return this.insert({ reference: value, source: 'extended' });
          },
        })
        .placeExtended(reference),
    newEntityManager: (reference) =>
      this.manager.save(Order, { reference, source: 'newEntityManager' }),
    newEntityManagerQueryBuilder: (reference) =>
      this.manager
        .createQueryBuilder()
        .insert()
        .into(Order)
        .values({ reference, source: 'newEntityManagerQueryBuilder' })
        .execute(),
    newEntityManagerQuery: (reference) =>
      this.manager.query(
        `INSERT INTO orders (reference, source) VALUES ($1, 'newEntityManagerQuery')`,
        [reference],
      ),
    newEntityManagerTransaction: (reference) =>
      this.manager.transaction((manager) =>
        manager.insert(Order, {
          reference,
          source: 'newEntityManagerTransaction',
        }),
      ),
    createdManagerRepository: (reference) =>
      this.created
        .getRepository(Order)
        .insert({ reference, source: 'createdManagerRepository' }),
    withRepository: (reference) =>
      this.manager
        .withRepository(this.ledger)
        .record(reference, 'withRepository'),
    prebuiltQueryBuilder: (reference) =>
      this.prebuilt
        .clone()
        .insert()
        .into(Order)
        .values({ reference, source: 'prebuiltQueryBuilder' })
        .execute(),
    prebuiltRepositoryQueryBuilder: (reference) =>
      this.prebuiltOrders
        .clone()
        .insert()
        .values({ reference, source: 'prebuiltRepositoryQueryBuilder' })
        .execute(),
  };

  /** Writes with `request.via`, then fails the first `failures` attempts. */
  async write(request: ManagerRequest): Promise<{ attempt: number }> {
    const attempt = (this.attempts.get(request.reference) ?? 0) + 1;
    this.attempts.set(request.reference, attempt);
    await this.ways[request.via](request.reference);
    if (attempt <= (request.failures ?? 0)) {
      throw new ServiceUnavailableException('gateway down');
    }
    return { attempt };
  }

  /**
   * Writes through a manager made on a query runner of its own, which the
   * handler's transaction leaves to it, then fails.
   */
  async ownRunner(request: ManagerRequest): Promise<never> {
    const runner = this.dataSource.createQueryRunner();
    try {
      await this.dataSource
        .createEntityManager(runner)
        .insert(Order, { reference: request.reference, source: 'ownRunner' });
    } finally {
      await runner.release();
    }
    throw new ServiceUnavailableException('gateway down');
  }

  /** The transaction id each way of reading sees. */
  async txids(): Promise<Record<string, string>> {
    const txid = 'SELECT txid_current()::text AS txid';
    const read = async (rows: Promise<Array<{ txid: string }>>) =>
      (await rows)[0].txid;
    return {
      customRepository: await read(this.orders.query(txid)),
      newEntityManager: await read(this.manager.query(txid)),
      newEntityManagerQueryBuilder: await read(
        this.manager
          .createQueryBuilder()
          .select('txid_current()::text', 'txid')
          .fromDummy()
          .getRawMany(),
      ),
      createdManager: await read(this.created.query(txid)),
    };
  }
}

@Controller()
export class ManagersController {
  constructor(private readonly managers: ManagersService) {}

  @Post('managers')
  @Idempotent()
  write(@Body() body: ManagerRequest) {
    return this.managers.write(body);
  }

  @Post('own-runner')
  @Idempotent()
  ownRunner(@Body() body: ManagerRequest) {
    return this.managers.ownRunner(body);
  }

  @Post('txids')
  @Idempotent()
  txids() {
    return this.managers.txids();
  }

  /** Not decorated: the managers write in autocommit, as ever. */
  @Post('plain')
  plain(@Body() body: ManagerRequest) {
    return this.managers.write(body);
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [ManagersController],
  providers: [ManagersService, OrderRepository],
})
export class ManagersTestModule {}
