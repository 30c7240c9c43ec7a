// binloop's bridge plugin for a Hanzo bot / OpenClaw (see docs/hanzo.md). Point
// plugins.load.paths at this directory and configure plugins.entries["binloop-bridge"].
//
// - after_tool_call: every tool call becomes a binloop telemetry record (redacted with
//   binloop's rules before it leaves the bot), published to NATS without blocking the
//   agent, buffered locally while NATS is down, or appended to a JSONL file;
// - before_tool_call: blocks the calls of a session that binloop has paused;
// - a tool factory: the library's active gated tools, through the sandboxed tool host.
import { homedir } from "node:os";
import { join } from "node:path";
import type { OpenClawPluginApi, OpenClawPluginDefinition } from "openclaw/plugin-sdk/core";
import { BLOCK_PREFIX, SessionControl } from "./src/control.ts";
import { Publisher } from "./src/publisher.ts";
import { sessionOf, toRecord, type ToolCallContext, type ToolCallEvent } from "./src/record.ts";
import { gatewayTarget } from "./src/host_client.ts";
import { LibraryTools } from "./src/tools.ts";

type BridgeConfig = {
  natsUrl?: string; natsUser?: string; natsPass?: string; natsToken?: string;
  natsTls?: { caFile?: string; certFile?: string; keyFile?: string }; natsModule?: string;
  subjectPrefix?: string; controlPrefix?: string; registrySubject?: string;
  jsonlPath?: string; bufferPath?: string; bufferMaxBytes?: number; batchMax?: number; flushMs?: number;
  agentId?: string; library?: string; python?: string; offerTools?: boolean; failureModePrefix?: boolean;
};

type Bridge = { publisher: Publisher; control: SessionControl; tools: LibraryTools | null; config: BridgeConfig };
const BRIDGES = Symbol.for("binloop.bridges");

// One bridge per configuration per process: the loader may register a plugin again
// (a new registry for other options) and that must not open a second connection.
function bridgeFor(config: BridgeConfig, logger: OpenClawPluginApi["logger"], botConfig: unknown): Bridge {
  const store = globalThis as unknown as Record<symbol, Map<string, Bridge> | undefined>;
  const bridges = store[BRIDGES] ?? (store[BRIDGES] = new Map());
  const key = JSON.stringify(config);
  const existing = bridges.get(key);
  if (existing) return existing;
  const log = { info: (m: string) => logger.info(m), warn: (m: string) => logger.warn(m), error: (m: string) => logger.error(m) };
  const publisher = new Publisher({
    natsUrl: config.natsUrl, natsUser: config.natsUser, natsPass: config.natsPass, natsToken: config.natsToken,
    natsTls: config.natsTls, natsModule: config.natsModule, subjectPrefix: config.subjectPrefix ?? "telemetry",
    jsonlPath: config.jsonlPath,
    bufferPath: config.bufferPath ?? join(homedir(), ".cache", "binloop", "bridge-buffer.jsonl"),
    bufferMaxBytes: config.bufferMaxBytes ?? 16 * 1024 * 1024, batchMax: config.batchMax ?? 256,
    flushMs: config.flushMs ?? 200,
  }, log);
  const control = new SessionControl(config.controlPrefix ?? "bin.control",
    config.registrySubject ?? "bin.registry.updated", 300_000, log);
  const tools = config.library && config.offerTools !== false
    ? new LibraryTools(config.library, config.python ?? "python3", gatewayTarget(botConfig)) : null;
  control.onRegistryUpdated = () => tools?.invalidate();
  void publisher.start().then((nc) => (nc ? control.subscribe(nc) : undefined)).catch((error: unknown) => {
    logger.error(`binloop bridge: start failed: ${String(error)}`);
  });
  const bridge = { publisher, control, tools, config };
  bridges.set(key, bridge);
  return bridge;
}

const plugin: OpenClawPluginDefinition = {
  id: "binloop-bridge",
  name: "binloop bridge",
  description: "binloop: tool-call telemetry to NATS, pause/resume of sessions, gated tools without a restart",
  configSchema: {
    safeParse(value: unknown) {
      if (value === undefined) return { success: true, data: {} };
      if (!value || typeof value !== "object" || Array.isArray(value)) {
        return { success: false, error: { issues: [{ path: [], message: "expected config object" }] } };
      }
      return { success: true, data: value };
    },
  },
  register(api: OpenClawPluginApi): void {
    const config = (api.pluginConfig ?? {}) as BridgeConfig;
    const bridge = bridgeFor(config, api.logger, api.config);
    const blocked = new Set<string>();

    api.on("before_tool_call", (event, ctx) => {
      const session = sessionOf(ctx as ToolCallContext);
      if (!bridge.control.isPaused(session)) return undefined;
      if (event.toolCallId) blocked.add(event.toolCallId);
      return { block: true, blockReason: bridge.control.blockReason(session) };
    });

    api.on("after_tool_call", (event, ctx) => {
      // A call the bridge itself held back is not friction of the tool.
      if ((event.toolCallId && blocked.delete(event.toolCallId)) ||
          (typeof event.error === "string" && event.error.includes(BLOCK_PREFIX))) return;
      try {
        const record = toRecord(event as ToolCallEvent, ctx as ToolCallContext,
          { agentId: config.agentId, failureModePrefix: config.failureModePrefix === true });
        bridge.control.noteCall(record.session_id, record.tool, record.outcome === "success");
        bridge.publisher.enqueue(record);
      } catch (error) {
        api.logger.warn(`binloop bridge: a tool call could not be recorded: ${String(error)}`);
      }
    });

    if (bridge.tools) {
      const tools = bridge.tools;
      api.registerTool((ctx) => tools.active(ctx.sessionKey));
    }

    api.registerService({
      id: "binloop-bridge",
      start: () => {},
      stop: () => bridge.publisher.stop(),
    });
  },
};

export default plugin;
