// Preloaded (`node --import`) into an agent run under strace: randomBytes(12), which names the durable writer's
// temp files, counts 1, 2, 3... instead, so a test knows the temp paths in advance and can aim strace's `-P`
// (and with it an injected fault) at the managed file's temp file alone. Every other size stays random.
import crypto from 'node:crypto';
import { syncBuiltinESMExports } from 'node:module';

const random = crypto.randomBytes;
let counter = 0;

function countingBytes(size, callback) {
  if (size !== 12) return random.call(crypto, size, callback);
  counter += 1;
  const bytes = Buffer.alloc(12);
  bytes.writeUInt32BE(counter, 8);
  if (typeof callback === 'function') {
    process.nextTick(callback, null, bytes);
    return undefined;
  }
  return bytes;
}

crypto.randomBytes = countingBytes;
syncBuiltinESMExports();
