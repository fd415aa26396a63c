// A loopback proxy in front of the mock service for the faults the mock cannot serve: any status with any raw
// header (a Retry-After as an HTTP date, negative, beyond any integer). Everything else passes through.
import { createServer, type IncomingMessage, request, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface HeaderFault {
  /** Tested against the request path (no query string). */
  match: RegExp;
  count: number;
  status: number;
  headers: Record<string, string>;
}

export interface FaultProxy {
  url: string;
  add(fault: HeaderFault): void;
  /** Requests per path that the proxy answered itself (faults) or passed on. */
  counts: { faulted: number; passed: number };
  close(): Promise<void>;
}

export async function startFaultProxy(targetUrl: string): Promise<FaultProxy> {
  const target = new URL(targetUrl);
  const faults: HeaderFault[] = [];
  const counts = { faulted: 0, passed: 0 };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const pathname = new URL(req.url ?? '/', 'http://proxy').pathname;
    const fault = faults.find((f) => f.count > 0 && f.match.test(pathname));
    if (fault !== undefined) {
      fault.count -= 1;
      counts.faulted += 1;
      req.resume();
      res.writeHead(fault.status, { 'content-type': 'application/json', ...fault.headers });
      res.end(JSON.stringify({ error: { code: 'injected', message: `injected ${fault.status}` } }));
      return;
    }
    counts.passed += 1;
    const upstream = request(
      { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    add: (fault) => faults.push({ ...fault }),
    counts,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
