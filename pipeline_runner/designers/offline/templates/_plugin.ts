// The Hanzo bot plugin wrapper appended to every generated TypeScript tool. It uses only
// the real plugin API (types from "openclaw/plugin-sdk/core"; the bot's own contract is
// checked too). A tool that calls another tool (retry, alias, guard, background) gets
// that call from binloop's tool host through `binloopHost` (binloop's own export, read
// by binloop's trusted harness, never by the bot): in a Hanzo bot, binloop's proxy
// answers it through the bot's POST /tools/invoke (docs/hanzo.md). The bot itself never
// loads this module (it loads binloop's proxy plugin).
import type { AnyAgentTool, OpenClawPluginApi, OpenClawPluginConfigSchema, OpenClawPluginDefinition } from "openclaw/plugin-sdk/core";
declare const NAME: string;
declare const DESCRIPTION: string;
declare const INPUT_SCHEMA: Record<string, unknown>;
declare function answer(params: Record<string, unknown>, invoke?: (tool: string, params: Record<string, unknown>, signal?: AbortSignal) => Promise<unknown>, signal?: AbortSignal): Promise<Record<string, unknown>>;

// binloop:body
let hostInvoke: ((tool: string, params: Record<string, unknown>, signal?: AbortSignal) => Promise<unknown>) | undefined;

export function binloopHost(invoke?: (tool: string, params: Record<string, unknown>, signal?: AbortSignal) => Promise<unknown>): void {
  hostInvoke = invoke;
}

// As the SDK's emptyPluginConfigSchema(): the plugin takes no configuration.
const configSchema: OpenClawPluginConfigSchema = {
  safeParse(value: unknown) {
    if (value === undefined) return { success: true, data: undefined };
    if (!isObject(value)) return { success: false, error: { issues: [{ path: [], message: "expected config object" }] } };
    if (Object.keys(value).length > 0) return { success: false, error: { issues: [{ path: [], message: "config must be empty" }] } };
    return { success: true, data: value };
  },
  jsonSchema: { type: "object", additionalProperties: false, properties: {} },
};

const tool: AnyAgentTool = {
  name: NAME,
  label: NAME.replace(/_/g, " "),
  description: DESCRIPTION,
  parameters: INPUT_SCHEMA,
  async execute(_toolCallId: string, params: unknown, signal?: AbortSignal) {
    const details = await answer(isObject(params) ? params : {}, hostInvoke, signal);
    return { content: [{ type: "text" as const, text: JSON.stringify(details) }], details };
  },
};

const plugin: OpenClawPluginDefinition = {
  id: `binloop-${NAME.replace(/_/g, "-")}`,
  name: NAME,
  description: DESCRIPTION,
  configSchema,
  register(api: OpenClawPluginApi): void {
    api.registerTool(tool);
  },
};

export default plugin;
