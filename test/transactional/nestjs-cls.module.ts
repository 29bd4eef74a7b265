import {
  BadRequestException,
  Body,
  Controller,
  Injectable,
  Module,
  Post,
  type DynamicModule,
} from '@nestjs/common';
import {
  ClsPluginTransactional,
  Propagation,
  Transactional,
  TransactionHost,
} from '@nestjs-cls/transactional';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsModule } from 'nestjs-cls';
import { IdempotencyTransactionalAdapter } from '../../src/cls/index.js';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

export interface ClsRequest {
  reference: string;
  fail?: boolean;
  /** The nested (savepoint) method throws, and the handler goes on. */
  failNested?: boolean;
}

/** What the commit hook saw, from the test's own connection. */
export interface ClsSight {
  readonly reference: string;
  readonly orders: string[];
  readonly record: string | undefined;
}

const txid = 'SELECT txid_current()::text AS txid';

/** Services written for @nestjs-cls/transactional, as it documents them. */
@Injectable()
export class AccountsService {
  /** What happened, in order. */
  log: string[] = [];
  /** Reads the domain rows and the record from the test's connection. */
  look: (reference: string) => Promise<ClsSight> = () =>
    Promise.reject(new Error('no look given'));
  /** Called with what each commit hook saw. */
  seen: (sight: ClsSight) => void = () => undefined;

  constructor(
    private readonly txHost: TransactionHost<IdempotencyTransactionalAdapter>,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Transactional()
  async required(reference: string): Promise<string> {
    await this.txHost.tx.insert(Order, { reference, source: 'required' });
    if (this.idempotency.isActive) {
      this.idempotency.afterCommit(async () => {
        this.log.push(`${reference}: after commit`);
        this.seen(await this.look(reference));
      });
    }
    return this.txid();
  }

  @Transactional(Propagation.Mandatory)
  async mandatory(reference: string): Promise<string> {
    await this.txHost.tx.insert(Order, { reference, source: 'mandatory' });
    return this.txid();
  }

  @Transactional(Propagation.RequiresNew)
  async audit(reference: string): Promise<string> {
    await this.txHost.tx.insert(Order, { reference, source: 'audit' });
    return this.txid();
  }

  /**
   * Outside of any transaction: through the manager, a repository and a
   * query builder.
   */
  @Transactional(Propagation.NotSupported)
  async unsupported(reference: string): Promise<void> {
    await this.txHost.tx.insert(Order, { reference, source: 'unsupported' });
    await this.txHost.tx
      .getRepository(Order)
      .insert({ reference, source: 'unsupported-repository' });
    await this.txHost.tx
      .createQueryBuilder()
      .insert()
      .into(Order)
      .values({ reference, source: 'unsupported-query-builder' })
      .execute();
  }

  @Transactional(Propagation.Nested)
  async nested(reference: string, fail?: boolean): Promise<void> {
    await this.txHost.tx.insert(Order, { reference, source: 'nested' });
    if (fail) {
      throw new Error('nested failure');
    }
  }

  async handle(request: ClsRequest): Promise<Record<string, unknown>> {
    const { reference } = request;
    const active = this.txHost.isTransactionActive();
    const required = await this.required(reference);
    const mandatory = await this.mandatory(reference);
    const audit = await this.audit(reference);
    await this.unsupported(reference);
    await this.nested(reference, request.failNested).catch(() => undefined);
    await this.txHost.tx.insert(Order, { reference });
    const handler = await this.txid();
    this.log.push(`${reference}: handler returns`);
    if (request.fail) {
      throw new BadRequestException('declined after the accounts');
    }
    return { active, required, mandatory, audit, handler };
  }

  /** Outside a decorated handler: the plugin opens its own transaction. */
  @Transactional()
  async plain(request: ClsRequest): Promise<Record<string, unknown>> {
    await this.txHost.tx.insert(Order, {
      reference: request.reference,
      source: 'plain',
    });
    return { active: this.txHost.isTransactionActive() };
  }

  private async txid(): Promise<string> {
    const [{ txid: id }] =
      await this.txHost.tx.query<Array<{ txid: string }>>(txid);
    return id;
  }
}

@Controller()
export class AccountsController {
  constructor(private readonly accounts: AccountsService) {}

  @Post('accounts')
  @Idempotent()
  create(@Body() body: ClsRequest) {
    return this.accounts.handle(body);
  }

  @Post('plain-accounts')
  plain(@Body() body: ClsRequest) {
    return this.accounts.plain(body);
  }
}

/** The plugin with the module's adapter, as the README shows it. */
export function clsModule(connectionName?: string): DynamicModule {
  return ClsModule.forRoot({
    global: true,
    middleware: { mount: true },
    plugins: [
      new ClsPluginTransactional({
        adapter: new IdempotencyTransactionalAdapter({
          dataSourceToken: getDataSourceToken(),
          connectionName,
        }),
      }),
    ],
  });
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [AccountsController],
  providers: [AccountsService],
})
export class NestjsClsTestModule {}
