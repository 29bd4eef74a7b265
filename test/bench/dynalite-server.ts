/**
 * DynamoDB for the stores bench: dynalite (in memory) in a process of its
 * own, so that its CPU is never the load generator's. Prints its endpoint;
 * ends on SIGTERM like any process.
 */
import { startDynalite } from '../utils/dynalite.js';

const dynamo = await startDynalite();
// stores.bench.ts waits for this line.
console.log(`dynalite listening on ${dynamo.endpoint}`);
