/**
 * Entry point of the benchmark's application (see bench.module.ts), started
 * by test/bench/bench.ts as a process of its own.
 */
import { BenchAppModule } from './bench.module.js';
import { listenBenchApp } from './listen.js';

await listenBenchApp(BenchAppModule);
