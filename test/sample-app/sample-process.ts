/**
 * Moved to test/utils/sample-process.ts. Kept only for test/bench, which
 * still imports it from here; remove once test/bench imports
 * ../utils/sample-process.js.
 */
export * from '../utils/sample-process.js';
