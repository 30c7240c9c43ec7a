// A binloop proxy plugin (written by binloop from the library's manifest; trusted): it
// offers the bot one gated tool, and its execute forwards each call to binloop's
// sandboxed tool host. The tool's own code never runs in the bot's process.
import type { OpenClawPluginApi, OpenClawPluginDefinition } from "openclaw/plugin-sdk/core";
import { toolHost } from "./host_client.ts";

const PROXY: { id: string; tool: string; version: number; label: string; description: string; parameters: Record<string, unknown>; python: string; library: string } = { id: "", tool: "", version: 0, label: "", description: "", parameters: {}, python: "", library: "" }; // binloop:fill

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
    api.registerTool({
      name: PROXY.tool,
      label: PROXY.label,
      description: PROXY.description,
      parameters: PROXY.parameters,
      async execute(_toolCallId: string, params: unknown, signal?: AbortSignal) {
        const args = params && typeof params === "object" && !Array.isArray(params) ? params as Record<string, unknown> : {};
        return toolHost(PROXY.python, PROXY.library).call(PROXY.tool, args, signal);
      },
    });
  },
};

export default plugin;
