// The bot side of binloop's sandboxed tool host (written by binloop; trusted). One host
// process per (python, library) per bot process, started on first use:
//   <python> -m pipeline_runner.sandbox.host --library DIR
// spoken to in JSON lines (COORDINATION.md "The tool host contract"). Generated tool code
// runs only there, in its sandbox; nothing of it is imported into the bot.
//
// A tool that wraps another tool (retry, alias, guard, background) calls it through the
// host's invoke round trip: the host writes {"id", "op": "invoke", "invoke_id", "tool",
// "params"} and this client answers with the result of an `Invoker`. In a bot that is
// `gatewayInvoker`: the bot's own `POST /tools/invoke` (its gateway's tool endpoint,
// gated by gateway auth and the agent's tool policy), the way the bot's plugins that run
// outside its process (Lobster) call its tools; the plugin API has no in-process call.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";

export type HostResult = { content: Array<{ type: "text"; text: string }>; details: unknown };
// Calls the tool `tool` of the bot for a wrapper tool; resolves to its result.
export type Invoker = (tool: string, params: Record<string, unknown>, signal?: AbortSignal) => Promise<unknown>;
// What a call may invoke: only `tools` (the one tool the wrapper wraps), through `run`.
export type InvokeGrant = { tools: readonly string[]; run: Invoker };
type Pending = {
  resolve: (value: Record<string, unknown>) => void; reject: (error: Error) => void; timer: NodeJS.Timeout;
  grant?: InvokeGrant; signal?: AbortSignal;
};

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
    createInterface({ input: child.stdout }).on("line", (line) => this.settle(line, child));
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

  private settle(line: string, child: ChildProcessWithoutNullStreams): void {
    let reply: Record<string, unknown>;
    try {
      reply = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    if (reply.op === "invoke") {
      this.answerInvoke(reply, child);
      return;
    }
    const waiting = this.pending.get(String(reply.id));
    if (!waiting) return;
    this.pending.delete(String(reply.id));
    clearTimeout(waiting.timer);
    waiting.resolve(reply);
  }

  // The host asks for the wrapped tool during call `id`: answered from that call's grant,
  // never for a tool the grant does not name (the host refuses those too).
  private answerInvoke(message: Record<string, unknown>, child: ChildProcessWithoutNullStreams): void {
    const id = message.id;
    const invokeId = message.invoke_id;
    const tool = String(message.tool ?? "");
    const params = message.params && typeof message.params === "object" && !Array.isArray(message.params)
      ? message.params as Record<string, unknown> : {};
    const answer = (outcome: { ok: true; result: unknown } | { ok: false; error: string }): void => {
      if (child.exitCode === null && !child.killed) {
        child.stdin.write(`${JSON.stringify({ id, op: "invoke_result", invoke_id: invokeId, ...outcome })}\n`);
      }
    };
    const waiting = this.pending.get(String(id));
    if (!waiting?.grant) {
      answer({ ok: false, error: `binloop proxy: call ${String(id).slice(0, 60)} may invoke no tool` });
      return;
    }
    if (!waiting.grant.tools.includes(tool)) {
      answer({ ok: false, error: `binloop proxy: this tool may not invoke ${JSON.stringify(tool.slice(0, 100))}; it may call ${waiting.grant.tools.join(", ") || "no tool"} only` });
      return;
    }
    waiting.grant.run(tool, params, waiting.signal).then(
      (result) => answer({ ok: true, result: result ?? null }),
      (error: unknown) => answer({ ok: false, error: String(error instanceof Error ? error.message : error).slice(0, 2000) }),
    );
  }

  request(message: Record<string, unknown>, signal?: AbortSignal, grant?: InvokeGrant): Promise<Record<string, unknown>> {
    const child = this.start();
    this.lastId += 1;
    const id = `bot-${process.pid}-${this.lastId}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`binloop tool host: no answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.pending.set(id, { resolve, reject, timer, grant, signal });
      signal?.addEventListener("abort", () => {
        if (this.pending.delete(id)) {
          clearTimeout(timer);
          reject(new Error("aborted"));
        }
      }, { once: true });
      child.stdin.write(`${JSON.stringify({ ...message, id })}\n`);
    });
  }

  // One call of `tool`; with a grant, the tool may invoke the granted tool meanwhile.
  async call(tool: string, params: Record<string, unknown>, signal?: AbortSignal, grant?: InvokeGrant): Promise<HostResult> {
    const reply = await this.request(grant ? { tool, params, invoke: true } : { tool, params }, signal, grant);
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

// -- the bot's side of an invoke: its gateway's POST /tools/invoke --------------------------
type Obj = Record<string, unknown>;
const isObj = (value: unknown): value is Obj => !!value && typeof value === "object" && !Array.isArray(value);
const DEFAULT_GATEWAY_PORT = 18789;
const INVOKE_TIMEOUT_MS = 25_000; // under the host's own 30 s wait for an invoke answer

export type GatewayTarget = { url: string; secret?: string };

// Where this bot's gateway listens and how to authenticate, as the bot resolves them:
// OPENCLAW_GATEWAY_PORT, else gateway.port, else 18789 (on loopback); gateway.auth's
// token or password (by gateway.auth.mode), else OPENCLAW_GATEWAY_TOKEN/_PASSWORD.
export function gatewayTarget(config: unknown, env: NodeJS.ProcessEnv = process.env): GatewayTarget {
  const gateway = isObj(config) && isObj(config.gateway) ? config.gateway : {};
  const auth = isObj(gateway.auth) ? gateway.auth : {};
  const envPort = Number.parseInt(env.OPENCLAW_GATEWAY_PORT?.trim() || env.CLAWDBOT_GATEWAY_PORT?.trim() || "", 10);
  const port = Number.isFinite(envPort) && envPort > 0 ? envPort
    : typeof gateway.port === "number" && gateway.port > 0 ? gateway.port : DEFAULT_GATEWAY_PORT;
  const text = (value: unknown): string | undefined => (typeof value === "string" && value.trim() ? value.trim() : undefined);
  const token = text(auth.token) ?? text(env.OPENCLAW_GATEWAY_TOKEN);
  const password = text(auth.password) ?? text(env.OPENCLAW_GATEWAY_PASSWORD);
  const secret = auth.mode === "password" ? password : auth.mode === "token" ? token : token ?? password;
  const scheme = isObj(gateway.tls) && gateway.tls.enabled === true ? "https" : "http";
  return { url: `${scheme}://127.0.0.1:${port}/tools/invoke`, secret };
}

// A tool's result as a wrapper sees it: its details (the JSON the agent would read),
// and the bot's own failure shape {status: "error", error} (what its tool adapter makes
// of a failed call) as a failure with that text.
function unwrap(result: unknown): unknown {
  const details = isObj(result) && "details" in result ? result.details : result;
  if (isObj(details) && details.status === "error" && typeof details.error === "string") {
    throw new Error(details.error);
  }
  return details ?? null;
}

// Invokes a tool of the bot through its gateway, in `sessionKey`'s session (its tool
// policy applies; absent: the bot's main session). Every failure is one clear error.
export function gatewayInvoker(target: GatewayTarget, sessionKey?: string, timeoutMs = INVOKE_TIMEOUT_MS): Invoker {
  return async (tool, params, signal) => {
    const limit = AbortSignal.timeout(timeoutMs);
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (target.secret) headers.authorization = `Bearer ${target.secret}`;
    let response: Response;
    try {
      response = await fetch(target.url, {
        method: "POST", headers, signal: signal ? AbortSignal.any([signal, limit]) : limit,
        body: JSON.stringify({ tool, args: params, ...(sessionKey ? { sessionKey } : {}) }),
      });
    } catch (error) {
      const cause = error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : String(error);
      if (limit.aborted) throw new Error(`${tool} timed out after ${timeoutMs} ms`);
      throw new Error(`no Hanzo bot gateway answers at ${target.url} to call ${tool} (${cause})`);
    }
    const body: unknown = await response.json().catch(() => null);
    if (response.ok && isObj(body) && body.ok === true) return unwrap(body.result);
    const reported = isObj(body) && isObj(body.error) && typeof body.error.message === "string" ? body.error.message : "";
    const kind = isObj(body) && isObj(body.error) ? body.error.type : undefined;
    if (response.status === 404) throw new Error(`${tool} is not available to this agent (no such tool, or the bot's tool policy does not allow it)`);
    if (response.status === 401 || (response.status === 403 && kind !== "tool_error")) {
      throw new Error(`the bot refused binloop's call of ${tool} (HTTP ${response.status}: a wrong or missing auth token or password)`);
    }
    if (response.status === 500) throw new Error(`${tool} failed (the bot keeps a thrown error's text in its log; /tools/invoke does not pass it on)`);
    throw new Error(reported || `${tool}: HTTP ${response.status} from the bot`);
  };
}
