/**
 * The sample's payments API on a data library other than TypeORM, for the
 * soak's instances (test/soak/soak-instances.ts): `SOAK_LIBRARY` names the
 * library (pg, drizzle, kysely, prisma, test/data-libraries/), whose client
 * writes on a pool of its own on `DATABASE_URL` (the sample's tables made
 * by its migrations beforehand), under `IdempotencyModule.forRoot()` on the
 * library's adapter with the options tuned-sample.js reads
 * (`SAMPLE_LEASE`, `SAMPLE_RETRY_AFTER`, `SAMPLE_PRESENCE`:
 * test/utils/sample-tuning.js). The same routes, validation and answers as
 * the sample's (payments.controller.ts); it prints the sample's ready line.
 * Compiled by `npm run build:sample` (tsconfig.json here).
 */
import 'reflect-metadata';
import {
  Module,
  type MiddlewareConsumer,
  type NestModule,
} from '@nestjs/common';
import { IdempotencyModule } from 'nestjs-idempotency';
import { BodyDepthMiddleware } from '../../../sample-app/payments/body-depth.middleware.js';
import { PaymentGateway } from '../../../sample-app/payments/payment-gateway.js';
import {
  isLibraryName,
  LIBRARY_NAMES,
  loadLibrary,
} from '../../data-libraries/payments-library.js';
import { sampleTuning, serveSample } from '../../utils/sample-tuning.js';
import { paymentsController } from './payments.controller.js';

const name = process.env.SOAK_LIBRARY ?? '';
if (!isLibraryName(name)) {
  throw new Error(
    `SOAK_LIBRARY=${name}: expected one of ${LIBRARY_NAMES.join(', ')}`,
  );
}
const library = await loadLibrary(name);
const { options, presence } = sampleTuning(process.env);
const controller = paymentsController(library);

@Module({
  imports: [
    IdempotencyModule.forRoot({
      ...options,
      adapter: library.adapter(presence === undefined ? {} : { presence }),
    }),
  ],
  controllers: [controller],
  providers: [...library.providers, PaymentGateway],
})
class LibraryPaymentsModule implements NestModule {
  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(BodyDepthMiddleware).forRoutes(controller);
  }
}

await serveSample(LibraryPaymentsModule, name);
