// A tool call seen on after_tool_call, as a binloop telemetry record (binloop's
// ToolInvocation: docs/hanzo.md has the mapping). failure_mode is left null: binloop
// infers it from the error text in its own parse step (one classifier for every source),
// unless the tool says its mode as a leading `CODE.detail:` and failureModePrefix is on.
import { createHash } from "node:crypto";
import { redactArgs, redactError } from "./redact.ts";

export type TelemetryRecord = {
  id: string;
  session_id: string;
  ts: number;
  tool: string;
  args: Record<string, unknown>;
  outcome: "success" | "failure" | "timeout";
  failure_mode: string | null;
  duration_ms?: number;
  agent_id?: string;
  error?: string;
};

export type ToolCallEvent = {
  toolName: string;
  params: Record<string, unknown>;
  runId?: string;
  toolCallId?: string;
  result?: unknown;
  error?: string;
  durationMs?: number;
};

export type ToolCallContext = { agentId?: string; sessionKey?: string; sessionId?: string; runId?: string; toolName: string; toolCallId?: string };

const TAXONOMY = new Set(["PERM", "NOTFOUND", "TIMEOUT", "SYNTAX", "RUNTIME", "TOOL_GAP", "ARGS", "CONFLICT", "NETWORK"]);
const MODE_PREFIX = /^\s*([A-Z_]+(?:\.[A-Za-z0-9_-]+)*)\s*:/;
const ERROR_MAX_CHARS = 4096;

export function sessionOf(ctx: ToolCallContext): string {
  return ctx.sessionId ?? ctx.sessionKey ?? "unknown";
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(",")}}`;
  }
  return JSON.stringify(value ?? null);
}

function errorText(event: ToolCallEvent): string | undefined {
  if (typeof event.error === "string" && event.error) return event.error;
  // The bot's adapter turns a thrown error into a result {status: "error", error}.
  const details = (event.result as { details?: unknown } | undefined)?.details;
  if (details && typeof details === "object" && (details as Record<string, unknown>).status === "error") {
    const text = (details as Record<string, unknown>).error;
    if (typeof text === "string" && text) return text;
  }
  return undefined;
}

export function toRecord(event: ToolCallEvent, ctx: ToolCallContext, options: { agentId?: string; failureModePrefix?: boolean; now?: number }): TelemetryRecord {
  const error = errorText(event);
  let failureMode: string | null = null;
  if (error !== undefined && options.failureModePrefix) {
    const match = MODE_PREFIX.exec(error);
    if (match && TAXONOMY.has(match[1]!.split(".")[0]!)) failureMode = match[1]!;
  }
  const params = event.params && typeof event.params === "object" && !Array.isArray(event.params) ? event.params : {};
  const record: TelemetryRecord = {
    id: "",
    session_id: sessionOf(ctx),
    ts: options.now ?? Date.now(),
    tool: event.toolName,
    args: redactArgs(params),
    outcome: error === undefined ? "success" : (failureMode?.startsWith("TIMEOUT") ? "timeout" : "failure"),
    failure_mode: failureMode,
  };
  if (typeof event.durationMs === "number" && event.durationMs >= 0) record.duration_ms = Math.round(event.durationMs);
  const agent = ctx.agentId ?? options.agentId;
  if (agent) record.agent_id = agent;
  if (error !== undefined) record.error = redactError(error).slice(0, ERROR_MAX_CHARS);
  // The call's own ids make the record id unique per call and stable on a re-send.
  const body = canonical({ ...record, id: undefined, call: `${event.runId ?? ctx.runId ?? ""}:${event.toolCallId ?? ctx.toolCallId ?? ""}` });
  record.id = createHash("sha256").update(body, "utf8").digest("hex");
  return record;
}
