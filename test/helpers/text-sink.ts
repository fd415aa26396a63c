// A writable stream that keeps what was written, for a command's stdout or stderr in tests.
import { Writable } from 'node:stream';

export function textSink(): { stream: Writable; text: () => string } {
  const chunks: string[] = [];
  return {
    stream: new Writable({
      write(chunk, _encoding, done) {
        chunks.push(String(chunk));
        done();
      },
    }),
    text: () => chunks.join(''),
  };
}
