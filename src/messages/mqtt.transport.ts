import { headerKey, type MessageTransport } from './message-transport.js';

/** What the adapter reads of Nest's `MqttContext`. */
interface MqttContextLike {
  getTopic(): unknown;
  getPacket():
    { properties?: { userProperties?: Record<string, unknown> } } | undefined;
}

/**
 * @internal MQTT (`MqttContext`): the key is a user property of the packet
 * named as a key header (MQTT 5); the broker has nothing to settle.
 */
export function mqttTransport(context: unknown): MessageTransport | undefined {
  if (typeof (context as MqttContextLike).getPacket !== 'function') {
    return undefined;
  }
  const mqtt = context as MqttContextLike;
  return {
    channel: mqtt.getTopic(),
    key: (names) =>
      headerKey(mqtt.getPacket()?.properties?.userProperties, names),
    settle: () => Promise.resolve(),
  };
}
