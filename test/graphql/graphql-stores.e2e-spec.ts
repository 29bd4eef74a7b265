/**
 * A mutation whose result JSON cannot hold (a back reference, as an ORM
 * entity's two-way relation has), on a store that completes after the
 * resolver (memory, Redis): its effects stay, so the key is kept as not
 * replayable, and a retry gets IDEMPOTENCY_NOT_REPLAYABLE without running
 * it again, as `run()` does. (On PostgreSQL the resolver's writes roll
 * back with the record, and the key is free: test/graphql.)
 */
import { Injectable, Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { randomUUID } from 'node:crypto';
import { Idempotent } from '../../src/index.js';
import { startStoreApp, type StoreApp } from '../utils/store-app.js';
import {
  memorySubject,
  redisSubject,
  type Subject,
} from '../utils/store-subjects.js';

@ObjectType('CyclicCharge')
class Charge {
  @Field(() => Int)
  id!: number;
}

@Injectable()
class Ledger {
  charges = 0;
}

@Resolver(() => Charge)
class ChargesResolver {
  constructor(private readonly ledger: Ledger) {}

  @Query(() => Int)
  charges(): number {
    return this.ledger.charges;
  }

  /** An effect, then a result with a back reference to itself. */
  @Mutation(() => Charge)
  @Idempotent()
  charge(@Args('amount', { type: () => Int }) amount: number): Charge {
    this.ledger.charges += 1;
    const charge: Record<string, unknown> = { id: amount };
    charge.self = charge;
    return charge as unknown as Charge;
  }
}

@Module({
  imports: [
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      includeStacktraceInErrorResponses: false,
    }),
  ],
  providers: [Ledger, ChargesResolver],
})
class ChargesModule {}

describe.each([
  ['memory', memorySubject],
  ['redis', redisSubject],
] as Array<[string, () => Promise<Subject>]>)(
  'a mutation whose result JSON cannot hold, on %s',
  (_name, subjectOf) => {
    let subject: Subject;
    let target: StoreApp;

    beforeAll(async () => {
      subject = await subjectOf();
      target = await startStoreApp({
        store: subject.store,
        imports: [ChargesModule],
      });
    });
    afterAll(async () => {
      await target?.close();
      await subject?.close();
    });

    const charge = async (key: string) => {
      const response = await fetch(`${target.url}/graphql`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'idempotency-key': key,
        },
        body: JSON.stringify({
          query: 'mutation { charge(amount: 5) { id } }',
        }),
      });
      const { errors } = (await response.json()) as {
        errors?: Array<{ message: string; extensions?: { code?: string } }>;
      };
      return errors?.map(({ message, extensions }) => ({
        message,
        code: extensions?.code,
      }));
    };

    it('runs once: the retry gets IDEMPOTENCY_NOT_REPLAYABLE, never a second charge', async () => {
      const key = randomUUID();
      const ledger = target.app.get(Ledger);
      const before = ledger.charges;
      expect(await charge(key)).toEqual([
        {
          message: expect.stringMatching(/^Converting circular structure/),
          code: 'INTERNAL_SERVER_ERROR',
        },
      ]);
      expect(await charge(key)).toEqual([
        {
          message: expect.any(String),
          code: 'IDEMPOTENCY_NOT_REPLAYABLE',
        },
      ]);
      expect(ledger.charges - before).toBe(1);
    });
  },
);
