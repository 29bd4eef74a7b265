import {
  ClientProxyFactory,
  Transport,
  type ClientProxy,
} from '@nestjs/microservices';
import {
  startTestApp,
  type TestApp,
  type TestAppOptions,
} from '../utils/test-app.js';

export const NATS_HOST = '127.0.0.1';
export const NATS_PORT = 4222;
const servers = [`nats://${NATS_HOST}:${NATS_PORT}`];

/** A test application with a NATS microservice, and a client of it. */
export interface NatsApp {
  readonly target: TestApp;
  readonly client: ClientProxy;
  close(): Promise<void>;
}

/**
 * Starts a test application on NATS: a hybrid application shares its
 * global interceptors with a microservice only with `inheritAppConfig`.
 */
export async function startNatsApp(options: TestAppOptions): Promise<NatsApp> {
  const target = await startTestApp(options);
  target.app.connectMicroservice(
    { transport: Transport.NATS, options: { servers } },
    { inheritAppConfig: true },
  );
  await target.app.startAllMicroservices();
  const client = ClientProxyFactory.create({
    transport: Transport.NATS,
    options: { servers },
  });
  await client.connect();
  return {
    target,
    client,
    close: async () => {
      await client.close();
      await target.close();
    },
  };
}
