// The streams and environment a command runs with: process's in main.ts, buffers in tests.
export interface CommandIo {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
  /** Whether stdout is a terminal (human output) rather than a pipe. */
  isTty: boolean;
}
