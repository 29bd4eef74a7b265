/**
 * The compiled sample app (dist-sample) under module options that a test
 * chooses through the environment, for a child process of a test (see
 * `TUNED_SAMPLE` in sample-process.ts). The sample itself reads none of these
 * variables: this entry builds its own application module around the
 * sample's database and payments modules.
 *
 * `SAMPLE_PRESENCE`, `SAMPLE_LEASE`, `SAMPLE_RETRY_AFTER`: see
 * sample-tuning.js.
 *
 * Plain JavaScript, so that it runs without a build of its own: decorators
 * are applied by calling them. It prints the sample's ready line.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { IdempotencyModule } from 'nestjs-idempotency';
import { PaymentsModule } from '../../dist-sample/payments/payments.module.js';
import { PaymentsDatabase } from '../../dist-sample/typeorm.options.js';
import { sampleTuning, serveSample } from './sample-tuning.js';

const tuning = sampleTuning(process.env);
const options = {
  ...tuning.options,
  ...(tuning.presence !== undefined && { presence: tuning.presence }),
};

class TunedSampleModule {}
Module({
  imports: [
    PaymentsDatabase,
    IdempotencyModule.forRoot(options),
    PaymentsModule,
  ],
})(TunedSampleModule);

await serveSample(TunedSampleModule);
