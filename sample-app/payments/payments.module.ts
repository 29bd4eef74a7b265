import {
  Module,
  type MiddlewareConsumer,
  type NestModule,
} from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { BodyDepthMiddleware } from './body-depth.middleware.js';
import { LedgerEntry } from './ledger-entry.entity.js';
import { Payment } from './payment.entity.js';
import { PaymentsController } from './payments.controller.js';
import { PaymentsService } from './payments.service.js';
import { PaymentGateway } from './payment-gateway.js';

@Module({
  imports: [TypeOrmModule.forFeature([Payment, LedgerEntry])],
  controllers: [PaymentsController],
  providers: [PaymentsService, PaymentGateway],
  exports: [PaymentsService, PaymentGateway],
})
export class PaymentsModule implements NestModule {
  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(BodyDepthMiddleware).forRoutes(PaymentsController);
  }
}
