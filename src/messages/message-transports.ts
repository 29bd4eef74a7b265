import { kafkaTransport } from './kafka.transport.js';
import { mqttTransport } from './mqtt.transport.js';
import { natsTransport } from './nats.transport.js';
import { rabbitmqTransport } from './rabbitmq.transport.js';
import { redisTransport } from './redis.transport.js';
import { tcpTransport } from './tcp.transport.js';
import { plainTransport, type MessageTransport } from './message-transport.js';

/**
 * The brokers, each recognising its context by what only it has (Kafka's
 * consumer, RabbitMQ's channel, NATS's subject, MQTT's packet, TCP's
 * socket, Redis's channel).
 */
const BROKERS: ReadonlyArray<
  (context: unknown) => MessageTransport | undefined
> = [
  kafkaTransport,
  rabbitmqTransport,
  natsTransport,
  mqttTransport,
  tcpTransport,
  redisTransport,
];

/**
 * @internal The broker of a message handler's context; a transport that
 * tells nothing for one the module does not know (a custom transporter).
 */
export function messageTransport(context: unknown): MessageTransport {
  if (context !== null && typeof context === 'object') {
    for (const broker of BROKERS) {
      const transport = broker(context);
      if (transport) {
        return transport;
      }
    }
  }
  return plainTransport(undefined);
}
