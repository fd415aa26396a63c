// The physical floor: plain Node publishing files with temp → fsync → rename → directory fsync, nothing else.
// Usage: node floor-loop.js <manifest.json> <rootDir> <inFlight>. The manifest is [{ path, text }].
import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdir, open, readFile, rename } from 'node:fs/promises';
import path from 'node:path';

interface ManifestEntry {
  path: string;
  text: string;
}

const [manifestFile, rootDir, inFlightArg] = process.argv.slice(2);
if (manifestFile === undefined || rootDir === undefined) {
  process.stderr.write('usage: floor-loop <manifest.json> <rootDir> [inFlight]\n');
  process.exit(2);
}
const inFlight = Math.max(1, Number(inFlightArg ?? 1));
const manifest = JSON.parse(await readFile(manifestFile, 'utf8')) as ManifestEntry[];
const made = new Map<string, Promise<unknown>>();

async function publish(entry: ManifestEntry): Promise<void> {
  const target = path.join(rootDir!, entry.path);
  const dir = path.dirname(target);
  let ready = made.get(dir);
  if (ready === undefined) {
    ready = mkdir(dir, { recursive: true });
    made.set(dir, ready);
  }
  await ready;
  const temp = path.join(dir, `.floor-tmp-${randomBytes(8).toString('hex')}`);
  const file = await open(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o644);
  try {
    await file.writeFile(entry.text);
    await file.sync();
  } finally {
    await file.close();
  }
  await rename(temp, target);
  const directory = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await directory.sync();
  } finally {
    await directory.close();
  }
}

let next = 0;
async function worker(): Promise<void> {
  while (next < manifest.length) {
    const entry = manifest[next++]!;
    await publish(entry);
  }
}
await Promise.all(Array.from({ length: inFlight }, worker));
