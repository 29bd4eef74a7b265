import {
  BadRequestException,
  Body,
  Controller,
  Injectable,
  Module,
  Post,
} from '@nestjs/common';
import {
  InjectDataSource,
  InjectEntityManager,
  InjectRepository,
  TypeOrmModule,
} from '@nestjs/typeorm';
import { DataSource, EntityManager, Repository } from 'typeorm';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

interface OrderRequest {
  reference: string;
  fail?: boolean;
}

/** A custom repository, on a manager of its own made at startup. */
@Injectable()
export class CustomOrders extends Repository<Order> {
  constructor(dataSource: DataSource) {
    super(Order, dataSource.createEntityManager());
  }
}

/** Writes through every data access style an application may use. */
@Injectable()
export class OrdersService {
  runs = 0;
  /** Where `/held` waits, before its first statement. */
  barrier = new Barrier();
  /** A manager the service made itself, at startup. */
  private readonly ownManager: EntityManager;

  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    @InjectDataSource() private readonly dataSource: DataSource,
    @InjectEntityManager() private readonly manager: EntityManager,
    private readonly idempotency: IdempotencyContext,
    private readonly customOrders: CustomOrders,
  ) {
    this.ownManager = new EntityManager(dataSource);
  }

  async create(request: OrderRequest): Promise<Order> {
    this.runs += 1;
    const order = await this.orders.save(
      this.orders.create({ reference: request.reference }),
    );
    if (request.fail) {
      throw new BadRequestException('card declined');
    }
    return order;
  }

  /**
   * Opened by the test once `/late` answered: the writes the handler did
   * not await then run, after the module ended its transaction.
   */
  lateGate = new Barrier();
  /** What became of each style's late write of `/late`. */
  late: Promise<Record<string, string>> | undefined;

  /**
   * A row, then one per style that the handler does not await: sent once
   * the test opens {@link lateGate}, still in the handler's context.
   */
  async lateWrites(request: OrderRequest): Promise<Order> {
    this.runs += 1;
    const order = await this.orders.save(
      this.orders.create({ reference: request.reference }),
    );
    const writes = Object.entries(this.styles(`${request.reference}:late`));
    this.late = this.lateGate.wait().then(async () =>
      Object.fromEntries(
        await Promise.all(
          writes.map(async ([style, write]) => [
            style,
            await Promise.resolve()
              .then(write)
              .then(
                () => 'written',
                (error: Error) => error.name,
              ),
          ]),
        ),
      ),
    );
    if (request.fail) {
      throw new BadRequestException('card declined');
    }
    return order;
  }

  /** Opened once `/unfinished`'s own transaction has written. */
  nestedStarted = new Barrier();
  /** Where `/unfinished`'s own transaction waits, not awaited by it. */
  nestedHeld = new Barrier();
  /** What became of `/unfinished`'s own transaction. */
  nested: Promise<string> | undefined;

  /**
   * A row, then a transaction of its own (a savepoint of the handler's)
   * that it does not await: the handler returns while it is open.
   */
  async unfinished(request: OrderRequest): Promise<{ ok: true }> {
    await this.orders.insert({ reference: request.reference });
    this.nested = this.dataSource.manager
      .transaction(async (manager) => {
        await manager.insert(Order, {
          reference: request.reference,
          source: 'nested',
        });
        this.nestedStarted.open();
        await this.nestedHeld.wait();
      })
      .then(
        () => 'committed',
        (error: Error) => error.name,
      );
    await this.nestedStarted.whenOpen();
    return { ok: true };
  }

  /** One insert of `reference` per data access style. */
  private styles(reference: string): Record<string, () => Promise<unknown>> {
    return {
      injectRepository: () =>
        this.orders.insert({
          reference,
          source: 'injectRepository',
        }),
      getRepository: () =>
        this.dataSource
          .getRepository(Order)
          .save({ reference, source: 'getRepository' }),
      dataSourceManager: () =>
        this.dataSource.manager.insert(Order, {
          reference,
          source: 'dataSourceManager',
        }),
      injectEntityManager: () =>
        this.manager.save(Order, {
          reference,
          source: 'injectEntityManager',
        }),
      queryBuilder: () =>
        this.dataSource
          .createQueryBuilder()
          .insert()
          .into(Order)
          .values({ reference, source: 'queryBuilder' })
          .execute(),
      rawQuery: () =>
        this.dataSource.query(
          `INSERT INTO orders (reference, source) VALUES ($1, 'rawQuery')`,
          [reference],
        ),
      idempotencyContext: () =>
        this.idempotency.manager.insert(Order, {
          reference,
          source: 'idempotencyContext',
        }),
      customRepository: () =>
        this.customOrders.save({ reference, source: 'customRepository' }),
      newEntityManager: () =>
        this.ownManager.save(Order, { reference, source: 'newEntityManager' }),
    };
  }

  /** One row and one transaction id per style. */
  async everyStyle(request: OrderRequest): Promise<Record<string, string>> {
    this.runs += 1;
    const txid = 'SELECT txid_current()::text AS txid';
    const styles = this.styles(request.reference);
    const txids: Record<string, string> = {};
    for (const [style, write] of Object.entries(styles)) {
      await write();
      const readers: Record<string, () => Promise<Array<{ txid: string }>>> = {
        injectRepository: () => this.orders.query(txid),
        getRepository: () => this.dataSource.getRepository(Order).query(txid),
        dataSourceManager: () => this.dataSource.manager.query(txid),
        injectEntityManager: () => this.manager.query(txid),
        queryBuilder: () =>
          this.dataSource
            .createQueryBuilder()
            .select('txid_current()::text', 'txid')
            .fromDummy()
            .getRawMany(),
        rawQuery: () => this.dataSource.query(txid),
        idempotencyContext: () => this.idempotency.manager.query(txid),
        customRepository: () => this.customOrders.query(txid),
        newEntityManager: () => this.ownManager.query(txid),
      };
      txids[style] = (await readers[style]())[0].txid;
    }
    if (request.fail) {
      throw new BadRequestException('card declined');
    }
    return txids;
  }
}

@Controller()
export class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  @Post('orders')
  @Idempotent()
  create(@Body() body: OrderRequest) {
    return this.orders.create(body);
  }

  @Post('every-style')
  @Idempotent()
  everyStyle(@Body() body: OrderRequest) {
    return this.orders.everyStyle(body);
  }

  @Post('unfinished')
  @Idempotent()
  unfinished(@Body() body: OrderRequest) {
    return this.orders.unfinished(body);
  }

  @Post('late')
  @Idempotent()
  late(@Body() body: OrderRequest) {
    return this.orders.lateWrites(body);
  }

  /** Waits for the test before its first statement. */
  @Post('held')
  @Idempotent()
  async held(@Body() body: OrderRequest) {
    await this.orders.barrier.wait();
    return this.orders.create(body);
  }

  /** Not decorated: the application's repositories behave as before. */
  @Post('plain')
  plain(@Body() body: OrderRequest) {
    return this.orders.create(body);
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [OrdersController],
  providers: [OrdersService, CustomOrders],
})
export class TransactionTestModule {}
