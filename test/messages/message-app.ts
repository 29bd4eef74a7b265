import {
  ClientProxyFactory,
  Transport,
  type ClientOptions,
  type ClientProxy,
} from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import {
  startTestApp,
  type TestApp,
  type TestAppOptions,
} from '../utils/test-app.js';

export const NATS_HOST = '127.0.0.1';
export const NATS_PORT = 4222;
/** The machine's NATS server, as server and client options. */
export const NATS: ClientOptions = {
  transport: Transport.NATS,
  options: { servers: [`nats://${NATS_HOST}:${NATS_PORT}`] },
};

/** A test application with a microservice, and a client of it. */
export interface MessageApp {
  readonly target: TestApp;
  readonly client: ClientProxy;
  /** The reply to a request, or the error the transport gave back. */
  request(
    pattern: string,
    data: unknown,
  ): Promise<{ reply?: unknown; error?: unknown }>;
  /** How many orders of `reference` committed. */
  orders(reference: string): Promise<number>;
  close(): Promise<void>;
}

/**
 * Starts a test application with a microservice on `transport`: a hybrid
 * application shares its global interceptors with a microservice only with
 * `inheritAppConfig`.
 */
export async function startMessageApp(
  options: TestAppOptions,
  transport: ClientOptions = NATS,
): Promise<MessageApp> {
  const target = await startTestApp(options);
  target.app.connectMicroservice(transport, { inheritAppConfig: true });
  await target.app.startAllMicroservices();
  const client = ClientProxyFactory.create(transport);
  await client.connect();
  return {
    target,
    client,
    request: (pattern, data) =>
      lastValueFrom(client.send<unknown>(pattern, data)).then(
        (reply) => ({ reply }),
        (error: unknown) => ({ error }),
      ),
    orders: async (reference) =>
      (
        await target.db.query('SELECT 1 FROM orders WHERE reference = $1', [
          reference,
        ])
      ).length,
    close: async () => {
      await client.close();
      await target.close();
    },
  };
}
