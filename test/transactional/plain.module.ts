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
  InjectRepository,
  TypeOrmModule,
} from '@nestjs/typeorm';
import { DataSource, Repository } from 'typeorm';
import {
  IdempotencyContext,
  Idempotent,
  type IdempotencyIsolationLevel,
} from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

export interface PlainRequest {
  reference: string;
  fail?: boolean;
  level?: IdempotencyIsolationLevel;
  /** The savepoint's refusal is caught, and the handler goes on. */
  caught?: boolean;
}

/** What a commit hook saw, from the test's own connection. */
export interface HookSight {
  readonly reference: string;
  readonly orders: number;
  readonly record: string | undefined;
}

/**
 * Handlers on plain TypeORM: the isolation level they run at, savepoints,
 * transactions of their own, and hooks after the commit.
 */
@Injectable()
export class PlainService {
  /** What happened, in order: handler steps and hooks. */
  log: string[] = [];
  /** Reads the domain rows and the record from the test's connection. */
  look: (reference: string) => Promise<HookSight> = () =>
    Promise.reject(new Error('no look given'));
  /** Called with what each hook saw. */
  seen: (sight: HookSight) => void = () => undefined;
  /** Where `/skew` waits, between its read and its write. */
  skew = new Barrier();
  /** Where `/abandoned` waits, after its write, past its deadline. */
  late = new Barrier();

  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly idempotency: IdempotencyContext,
  ) {}

  async level(request: PlainRequest): Promise<{ level: string }> {
    const [{ level }] = await this.dataSource.query<Array<{ level: string }>>(
      "SELECT current_setting('transaction_isolation') AS level",
    );
    await this.orders.insert({ reference: request.reference });
    return { level };
  }

  /** A savepoint that asks for an isolation level. */
  async savepoint(
    request: PlainRequest,
  ): Promise<{ level: string } | { refused: string }> {
    await this.orders.insert({ reference: request.reference, source: 'outer' });
    if (request.caught) {
      try {
        return await this.inSavepoint(request);
      } catch (error) {
        await this.orders.insert({
          reference: request.reference,
          source: 'after',
        });
        return { refused: (error as Error).message };
      }
    }
    return this.inSavepoint(request);
  }

  private inSavepoint(request: PlainRequest): Promise<{ level: string }> {
    return this.dataSource.transaction(request.level!, async (manager) => {
      await manager.insert(Order, {
        reference: request.reference,
        source: 'savepoint',
      });
      const [{ level }] = await manager.query<Array<{ level: string }>>(
        "SELECT current_setting('transaction_isolation') AS level",
      );
      return { level };
    });
  }

  /** Write skew: reads, waits for the other request, then writes. */
  async writeSkew(request: PlainRequest): Promise<{ before: number }> {
    const before = await this.orders.countBy({ source: 'skew' });
    await this.skew.wait();
    await this.orders.insert({ reference: request.reference, source: 'skew' });
    return { before };
  }

  /** An audit row in a transaction of its own, then the handler's write. */
  async audited(request: PlainRequest): Promise<{ audit: string }> {
    const audit = await this.idempotency.newTransaction(async (manager) => {
      await manager.insert(Order, {
        reference: request.reference,
        source: 'audit',
      });
      const [{ txid }] = await manager.query<Array<{ txid: string }>>(
        'SELECT txid_current()::text AS txid',
      );
      return txid;
    });
    await this.orders.insert({ reference: request.reference });
    if (request.fail) {
      throw new BadRequestException('declined after the audit');
    }
    return { audit };
  }

  /** Writes, adds two hooks (the first one fails), then maybe throws. */
  async notify(request: PlainRequest): Promise<{ reference: string }> {
    const { reference } = request;
    this.idempotency.afterCommit(() => {
      this.log.push(`${reference}: failing hook`);
      throw new Error('the mail server is down');
    });
    await this.orders.insert({ reference });
    this.idempotency.afterCommit(async () => {
      const sight = await this.look(reference);
      this.log.push(`${reference}: hook`);
      this.seen(sight);
    });
    this.log.push(`${reference}: handler returns`);
    if (request.fail) {
      throw new BadRequestException('declined after the hooks');
    }
    return { reference };
  }

  /** Writes and adds a hook, then waits past the request's deadline. */
  async abandoned(request: PlainRequest): Promise<{ reference: string }> {
    const { reference } = request;
    await this.orders.insert({ reference });
    this.idempotency.afterCommit(() => {
      this.log.push(`${reference}: hook`);
    });
    await this.late.wait();
    return { reference };
  }
}

@Controller()
export class PlainController {
  constructor(private readonly service: PlainService) {}

  @Post('level')
  @Idempotent()
  level(@Body() body: PlainRequest) {
    return this.service.level(body);
  }

  @Post('serializable')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  serializable(@Body() body: PlainRequest) {
    return this.service.level(body);
  }

  @Post('savepoint')
  @Idempotent()
  savepoint(@Body() body: PlainRequest) {
    return this.service.savepoint(body);
  }

  @Post('serializable-savepoint')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  serializableSavepoint(@Body() body: PlainRequest) {
    return this.service.savepoint(body);
  }

  @Post('skew')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  skew(@Body() body: PlainRequest) {
    return this.service.writeSkew(body);
  }

  @Post('audited')
  @Idempotent()
  audited(@Body() body: PlainRequest) {
    return this.service.audited(body);
  }

  @Post('notify')
  @Idempotent()
  notify(@Body() body: PlainRequest) {
    return this.service.notify(body);
  }

  @Post('abandoned')
  @Idempotent({ transactionTimeout: '1s' })
  abandoned(@Body() body: PlainRequest) {
    return this.service.abandoned(body);
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [PlainController],
  providers: [PlainService],
})
export class PlainTestModule {}
