// A real pino logger whose JSON lines the test reads back.
import { Writable } from 'node:stream';
import { createLogger } from '../../src/logger.js';

/** A logger at `info` whose lines are kept in `captured`. */
export function capturingLogger() {
  const captured: string[] = [];
  const log = createLogger(
    'info',
    new Writable({
      write(chunk: Buffer, _e, done) {
        captured.push(chunk.toString());
        done();
      },
    }),
  );
  return { log, captured };
}
