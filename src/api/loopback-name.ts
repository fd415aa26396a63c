// `localhost` and `*.localhost` answered as loopback without the system resolver (RFC 6761 6.3), so the key never follows a resolver's answer elsewhere.
import type { LookupAddress, LookupOptions } from 'node:dns';

/** Whether `hostname` is a name RFC 6761 reserves for loopback: `localhost` or a name under it. */
export function isLoopbackName(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}

const LOOPBACK: readonly LookupAddress[] = [
  { address: '127.0.0.1', family: 4 },
  { address: '::1', family: 6 },
];

type LookupCallback = (
  error: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void;

/**
 * A `lookup` for net/tls/http that answers a loopback name with the loopback addresses: the system resolver asks
 * the network's DNS for `localhost` when `/etc/hosts` has no line for it (`hosts: files dns`, no `myhostname`),
 * and a hostile resolver's answer would take the API key, in clear over `http://localhost`, to another host.
 */
export function loopbackLookup(_hostname: string, options: LookupOptions, callback: LookupCallback): void {
  const family = options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : options.family;
  const addresses = LOOPBACK.filter(
    (entry) => family === undefined || family === 0 || entry.family === family,
  );
  const first = addresses[0] ?? { address: '127.0.0.1', family: 4 };
  if (options.all === true) process.nextTick(callback, null, addresses.length > 0 ? [...addresses] : [first]);
  else process.nextTick(callback, null, first.address, first.family);
}
