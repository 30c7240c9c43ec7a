// A binloop proxy plugin (written by binloop from the library's manifest; trusted): it
// offers the bot one gated tool, and its execute forwards each call to binloop's
// sandboxed tool host. The tool's own code never runs in the bot's process. A tool that
// wraps another tool (`invokes` names it) gets that one tool, and no other, through the
// bot's own POST /tools/invoke, in the session of the call (host_client.ts).
import type { OpenClawPluginApi, OpenClawPluginDefinition, OpenClawPluginToolContext } from "openclaw/plugin-sdk/core";
import { gatewayInvoker, gatewayTarget, toolHost } from "./host_client.ts";

const PROXY: { id: string; tool: string; version: number; label: string; description: string; parameters: Record<string, unknown>; python: string; library: string; invokes: string[] } = { id: "", tool: "", version: 0, label: "", description: "", parameters: {}, python: "", library: "", invokes: [] }; // binloop:fill

const plugin: OpenClawPluginDefinition = {
  id: PROXY.id,
  name: PROXY.tool,
  description: PROXY.description,
  configSchema: {
    safeParse(value: unknown) {
      if (value === undefined) return { success: true, data: undefined };
      if (!value || typeof value !== "object" || Array.isArray(value) || Object.keys(value).length > 0) {
        return { success: false, error: { issues: [{ path: [], message: "config must be empty" }] } };
      }
      return { success: true, data: value };
    },
    jsonSchema: { type: "object", additionalProperties: false, properties: {} },
  },
  register(api: OpenClawPluginApi): void {
    const gateway = gatewayTarget(api.config);
    // A factory: the bot calls it for each agent run, with that run's session.
    api.registerTool((ctx: OpenClawPluginToolContext) => ({
      name: PROXY.tool,
      label: PROXY.label,
      description: PROXY.description,
      parameters: PROXY.parameters,
      async execute(_toolCallId: string, params: unknown, signal?: AbortSignal) {
        const args = params && typeof params === "object" && !Array.isArray(params) ? params as Record<string, unknown> : {};
        const grant = PROXY.invokes.length > 0 ? { tools: PROXY.invokes, run: gatewayInvoker(gateway, ctx.sessionKey) } : undefined;
        return toolHost(PROXY.python, PROXY.library).call(PROXY.tool, args, signal, grant);
      },
    }), { name: PROXY.tool });
  },
};

export default plugin;
