// The bot side of binloop's sandboxed tool host (written by binloop; trusted). One host
// process per (python, library) per bot process, started on first use:
//   <python> -m pipeline_runner.sandbox.host --library DIR
// spoken to in JSON lines (COORDINATION.md "The tool host contract"). Generated tool code
// runs only there, in its sandbox; nothing of it is imported into the bot.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";

export type HostResult = { content: Array<{ type: "text"; text: string }>; details: unknown };
type Pending = { resolve: (value: Record<string, unknown>) => void; reject: (error: Error) => void; timer: NodeJS.Timeout };

// Only what the host needs: never the bot's keys (the host scrubs again for each tool).
const PASSED_ENV = ["PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV"];

export class ToolHostClient {
  private child: ChildProcessWithoutNullStreams | null = null;
  private pending = new Map<string, Pending>();
  private lastId = 0;

  readonly python: string;
  readonly library: string;
  readonly timeoutMs: number;

  constructor(python: string, library: string, timeoutMs = 60_000) {
    this.python = python;
    this.library = library;
    this.timeoutMs = timeoutMs;
  }

  private start(): ChildProcessWithoutNullStreams {
    if (this.child && this.child.exitCode === null && !this.child.killed) return this.child;
    const env: Record<string, string> = {};
    for (const key of PASSED_ENV) if (process.env[key]) env[key] = process.env[key] as string;
    const child = spawn(this.python, ["-m", "pipeline_runner.sandbox.host", "--library", this.library],
      { env, stdio: ["pipe", "pipe", "pipe"] });
    child.stderr.on("data", () => {});
    createInterface({ input: child.stdout }).on("line", (line) => this.settle(line));
    child.on("exit", (code) => {
      for (const [id, waiting] of this.pending) {
        clearTimeout(waiting.timer);
        waiting.reject(new Error(`binloop tool host exited (${code})`));
        this.pending.delete(id);
      }
      if (this.child === child) this.child = null;
    });
    child.on("error", (error) => {
      for (const waiting of this.pending.values()) waiting.reject(error);
      this.pending.clear();
    });
    child.unref();
    (child.stdin as unknown as { unref?: () => void }).unref?.();
    (child.stdout as unknown as { unref?: () => void }).unref?.();
    (child.stderr as unknown as { unref?: () => void }).unref?.();
    this.child = child;
    return child;
  }

  private settle(line: string): void {
    let reply: Record<string, unknown>;
    try {
      reply = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    const waiting = this.pending.get(String(reply.id));
    if (!waiting) return;
    this.pending.delete(String(reply.id));
    clearTimeout(waiting.timer);
    waiting.resolve(reply);
  }

  request(message: Record<string, unknown>, signal?: AbortSignal): Promise<Record<string, unknown>> {
    const child = this.start();
    this.lastId += 1;
    const id = `bot-${process.pid}-${this.lastId}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`binloop tool host: no answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      signal?.addEventListener("abort", () => {
        if (this.pending.delete(id)) {
          clearTimeout(timer);
          reject(new Error("aborted"));
        }
      }, { once: true });
      child.stdin.write(`${JSON.stringify({ ...message, id })}\n`);
    });
  }

  async call(tool: string, params: Record<string, unknown>, signal?: AbortSignal): Promise<HostResult> {
    const reply = await this.request({ tool, params }, signal);
    if (reply.ok !== true) throw new Error(String(reply.error ?? "the tool host refused the call"));
    return reply.result as HostResult;
  }

  async reload(): Promise<string[]> {
    const reply = await this.request({ op: "reload" });
    if (reply.ok !== true) throw new Error(String(reply.error ?? "reload failed"));
    return (reply.tools as string[]) ?? [];
  }

  close(): void {
    this.child?.stdin.end();
    this.child = null;
  }
}

const HOSTS = Symbol.for("binloop.toolHosts");

// The one client of this bot process for (python, library).
export function toolHost(python: string, library: string): ToolHostClient {
  const store = globalThis as unknown as Record<symbol, Map<string, ToolHostClient> | undefined>;
  const hosts = store[HOSTS] ?? (store[HOSTS] = new Map());
  const key = `${python}\u0000${library}`;
  let host = hosts.get(key);
  if (!host) {
    host = new ToolHostClient(python, library);
    hosts.set(key, host);
  }
  return host;
}
