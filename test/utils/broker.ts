/**
 * The brokers' suites skip visibly when their broker is unreachable, and
 * fail instead under REQUIRE_BROKERS=1 (see `describeWithServer`).
 */
export {
  describeWithServer as describeWithBroker,
  reachable,
} from './server.js';
