// The Hanzo bot plugin wrapper appended to every generated TypeScript tool.
import type { BotPlugin, BotPluginApi, ToolResult } from "./types/hanzo-bot.js";
declare const NAME: string;
declare const DESCRIPTION: string;
declare const INPUT_SCHEMA: Record<string, unknown>;
declare function answer(params: Record<string, unknown>, invoke?: (tool: string, params: Record<string, unknown>, signal?: AbortSignal) => Promise<unknown>, signal?: AbortSignal): Promise<Record<string, unknown>>;

// binloop:body
const plugin: BotPlugin = {
  id: `binloop-${NAME.replace(/_/g, "-")}`,
  name: NAME,
  description: DESCRIPTION,
  configSchema: { type: "object", properties: {}, additionalProperties: false },
  register(api: BotPluginApi): void {
    const invoke = api.invokeTool;
    api.registerTool({
      name: NAME,
      label: NAME.replace(/_/g, " "),
      description: DESCRIPTION,
      parameters: INPUT_SCHEMA,
      async execute(_toolCallId: string, params: Record<string, unknown>, signal?: AbortSignal): Promise<ToolResult<Record<string, unknown>>> {
        const details = await answer(isObject(params) ? params : {}, invoke, signal);
        return { content: [{ type: "text", text: JSON.stringify(details) }], details };
      },
    });
  },
};

export default plugin;
