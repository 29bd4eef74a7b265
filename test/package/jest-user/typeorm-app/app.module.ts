/*
 * The root module of an application set up as the README's five-minute
 * setup: TypeORM on PostgreSQL with the module's migrations, and the module
 * on its default store, PostgreSQL's, over that DataSource.
 */
import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IdempotencyModule } from 'nestjs-idempotency';
import { idempotencyMigrations } from 'nestjs-idempotency/migrations';
import { PaymentsController } from './payments.controller.js';

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      migrations: [...idempotencyMigrations],
      migrationsRun: true,
    }),
    IdempotencyModule.forRoot({ ttl: '24h' }),
  ],
  controllers: [PaymentsController],
})
export class AppModule {}
