import {
  Body,
  Controller,
  Header,
  Module,
  Post,
  type Type,
} from '@nestjs/common';
import { TypeOrmModule, type TypeOrmModuleOptions } from '@nestjs/typeorm';
import { IdempotencyModule, Idempotent } from '../../src/index.js';
import { idempotencyMigrations } from '../../migrations/index.js';

/** A decorated route that counts its executions. */
@Controller('payments')
export class PaymentsController {
  /** How many times the handler ran. */
  executions = 0;

  @Post()
  @Header('Location', '/payments/latest')
  @Idempotent()
  create(@Body() body: { reference: string }): {
    execution: number;
    reference: string;
  } {
    this.executions += 1;
    return { execution: this.executions, reference: body.reference };
  }
}

@Module({ controllers: [PaymentsController] })
export class PaymentsModule {}

/**
 * The root module of an application set up as the README's setup shows:
 * TypeORM on PostgreSQL at `url` with the module's migrations, and the
 * module on its default store, PostgreSQL's, over that DataSource.
 */
export function appModule(
  url: string,
  typeorm: Partial<TypeOrmModuleOptions> = {},
): Type {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url,
        migrations: [...idempotencyMigrations],
        migrationsRun: true,
        ...typeorm,
      } as TypeOrmModuleOptions),
      IdempotencyModule.forRoot(),
      PaymentsModule,
    ],
  })
  class AppModule {}
  return AppModule;
}
