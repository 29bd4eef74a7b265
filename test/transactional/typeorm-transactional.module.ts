import {
  BadRequestException,
  Body,
  Controller,
  Injectable,
  Module,
  Post,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import {
  Propagation,
  runOnTransactionCommit,
  runOnTransactionComplete,
  runOnTransactionRollback,
  Transactional,
} from 'typeorm-transactional';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

export interface TransactionalRequest {
  reference: string;
  fail?: boolean;
}

/** What the commit hook saw, from the test's own connection. */
export interface CommittedSight {
  readonly orders: string[];
  readonly record: string | undefined;
}

const txid = 'SELECT txid_current()::text AS txid';

/** Services written for typeorm-transactional, as the library documents. */
@Injectable()
export class LedgerService {
  /** What happened, in order: handler steps and hooks. */
  log: string[] = [];
  /** Reads the domain rows and the record from the test's connection. */
  look: (reference: string) => Promise<CommittedSight> = () =>
    Promise.reject(new Error('no look given'));
  /** Called when the hooks of a request have all run. */
  completed: (reference: string, sight?: CommittedSight) => void = () =>
    undefined;

  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @Transactional()
  async required(reference: string): Promise<string> {
    await this.orders.insert({ reference, source: 'required' });
    let sight: CommittedSight | undefined;
    runOnTransactionCommit(() => {
      this.log.push(`${reference}: commit hook`);
      void this.look(reference).then((seen) => {
        sight = seen;
        this.completed(reference, sight);
      });
    });
    runOnTransactionRollback((error: Error) => {
      this.log.push(`${reference}: rollback hook (${error.message})`);
    });
    runOnTransactionComplete(() => {
      this.log.push(`${reference}: complete hook`);
      if (!this.log.includes(`${reference}: commit hook`)) {
        this.completed(reference);
      }
    });
    return this.txid();
  }

  @Transactional({ propagation: Propagation.MANDATORY })
  async mandatory(reference: string): Promise<string> {
    await this.orders.insert({ reference, source: 'mandatory' });
    return this.txid();
  }

  @Transactional({ propagation: Propagation.REQUIRES_NEW })
  async audit(reference: string): Promise<string> {
    await this.orders.insert({ reference, source: 'audit' });
    runOnTransactionCommit(() => this.log.push(`${reference}: audit commit`));
    return this.txid();
  }

  async handle(request: TransactionalRequest): Promise<Record<string, string>> {
    const { reference } = request;
    const required = await this.required(reference);
    const mandatory = await this.mandatory(reference);
    const audit = await this.audit(reference);
    await this.orders.insert({ reference });
    const handler = await this.txid();
    this.log.push(`${reference}: handler returns`);
    if (request.fail) {
      throw new BadRequestException('declined after the ledger');
    }
    return { required, mandatory, audit, handler };
  }

  private async txid(): Promise<string> {
    const [{ txid: id }] =
      await this.orders.query<Array<{ txid: string }>>(txid);
    return id;
  }
}

@Controller()
export class LedgerController {
  constructor(private readonly ledger: LedgerService) {}

  @Post('ledger')
  @Idempotent()
  create(@Body() body: TransactionalRequest) {
    return this.ledger.handle(body);
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [LedgerController],
  providers: [LedgerService],
})
export class TypeormTransactionalTestModule {}
